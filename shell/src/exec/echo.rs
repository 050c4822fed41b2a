//! The built-in `echo` backend: a deterministic agent that streams back
//! `Echo: <message>` for every turn, and keeps its own transcript of each
//! conversation at `<data-dir>/echo/<conversation_id>.json`, so a session
//! comes back after a sleep or a restart the way it would from a real
//! agent's own transcript. The file's format, and the scan's bounded read
//! of it, are [`super::echo_transcript`]'s: JSON lines, a finished turn
//! appended and fsynced once.
//!
//! Every chat gets one actor task that takes that chat's commands in issue
//! order; a running turn is a task of its own that streams actions as
//! `Input::Backend` events. A finished turn is written to the transcript
//! before its last action is sent, so a turn the host saw complete is always
//! on disk.
//!
//! Directives at the start of a message drive every status, for tests and
//! demos (times in ms, capped at 10 minutes):
//! - `/fail`: the agent refuses the turn (`Send` answers `Failed`).
//! - `/error`: the reply streams, then the turn ends with `chat/error`,
//!   marked resumable: `chat/turnResume` (`BackendCmd::Resume`) reopens it
//!   and the reply goes on (`Echo (resumed): <message>` in a part of its
//!   own), then the turn completes. The transcript keeps the errored turn
//!   until the resumed one ends, then holds the turn as it ended instead.
//! - `/slow <ms>`: the reply is spread over that long.
//! - `/approve`: a tool call waits for confirmation; approved, it completes
//!   and the reply follows; denied, the reply is `Echo: tool denied`.
//! - `/ask <question>`: the agent asks `<question>` (`chat/inputRequested`,
//!   one text question with id `answer`) and waits for the host's word
//!   (`BackendCmd::Answer`): accepted, the reply is `Echo: <the answer>`;
//!   declined, `Echo: you declined to answer`; cancelled, `Echo: you
//!   cancelled the question`. A cancelled turn takes its question with it.
//! - steering: a steering message handed to a running turn
//!   (`BackendCmd::Steer`) is taken between two chunks of its reply
//!   (`BackendEvent::SteeringTaken`) and answered in a part of its own,
//!   `Echo (steered): <message>`; try it with a `/slow` turn. A turn that
//!   ends first takes none, and the host runs it as the next turn.
//! - attachments: every reply ends with the files its message attaches,
//!   read as an ACP agent's are (within the session's folders,
//!   `ahpd_core::files::attachments`) and named with their size or why they
//!   were not read: `Attached: notes.md (6 bytes)`.
//! - `/crash`: the agent exits mid-turn (`BackendEvent::Exited`).
//! - `/busy <ms>`: background work is reported for that long
//!   (`BackendEvent::Busy`), then the turn completes normally.
//! - `/write <relative path> [text]`: a `write_file` tool call that
//!   declares the path it writes (`_meta["ahpd.writes"]`, workspace
//!   awareness) and waits for the host's word (`ConfirmTool`): approved, it
//!   writes `text` (or a fixed line) and a newline to that file under the
//!   chat's working directory, reports it
//!   (`BackendEvent::Wrote`, the session's claim) and completes; denied, the
//!   reply is `Echo: tool denied`. A path that is absolute, names `..`, or
//!   a chat with no working directory gets `Echo: cannot write: ...`.
//! - Host tools (issue 24), called as the chat's agent through the same
//!   core input the host's MCP server uses (`EventSink::host_tool`); the
//!   reply is `Echo: tool answered: <JSON>` or `Echo: tool refused:
//!   <code>: <why>`:
//!   - `/wake <seconds> <prompt>`: `schedule_wakeup` after that long;
//!     `/wake-at <RFC 3339 time> <prompt>`: at that time.
//!   - `/unwake <id>`: `cancel_wakeup`.
//!   - `/send <session URI> <text>`: `send_message`.
//!   - `/peers`: `list_peers`.
//!   - `/child <provider> <prompt>`: `start_child_session`;
//!     `/child-status <session URI>`: `child_status`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use ahp::reducers::apply_action_to_chat;
use ahpd_core::HostToolRequest;
use ahp_types::actions::{
    ChatDeltaAction, ChatErrorAction, ChatInputCompletedAction, ChatInputRequestedAction, ChatResponsePartAction, ChatToolCallCompleteAction, ChatToolCallReadyAction,
    ChatToolCallStartAction, ChatTurnCancelledAction, ChatTurnCompleteAction, ChatTurnStartedAction, StateAction,
};
use ahp_types::common::StringOrMarkdown;
use ahp_types::state::{
    ChatInputAnswer, ChatInputAnswerValue, ChatInputRequest, ChatInputResponseKind, ChatState, ErrorInfo, ErrorResponsePart, MarkdownResponsePart, Message, ResponsePart, ToolCallResult, Turn,
};
use ahp_types::Uri;
use ahpd_core::{BackendCmd, BackendEvent, Input, OpId, Outcome, ScannedRow, WallTime};
use ahpd_core::files::attachments::AttachmentReads;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::echo_transcript::{self, file_name, FileIn, Header};
use super::fs::AttachmentBody;
use super::fsutil;
use crate::events::EventSink;

/// Time between two streamed chunks of a normal reply, in ms.
const CHUNK_DELAY_MS: u64 = 20;
/// Most chunks a reply is streamed in.
const MAX_CHUNKS: usize = 4;
/// Longest delay a directive may ask for, in ms (10 minutes).
const MAX_DIRECTIVE_MS: u64 = 600_000;
/// The id of the one question the `/ask` directive asks.
const ASK_QUESTION_ID: &str = "answer";
/// The tool the `/approve` directive calls.
const TOOL_NAME: &str = "echo_tool";

/// The echo backend: one actor per chat, created on first use.
pub struct Echo {
    dir: PathBuf,
    events: EventSink,
    chats: HashMap<Uri, mpsc::UnboundedSender<ChatMsg>>,
}

impl Echo {
    /// An echo backend keeping transcripts in `dir` (which must exist).
    pub fn new(dir: PathBuf, events: EventSink) -> Echo {
        Echo { dir, events, chats: HashMap::new() }
    }

    /// Hands one command to `chat`'s actor; the answer comes back as
    /// `Input::Done { op, .. }`.
    pub fn execute(&mut self, op: OpId, chat: Uri, command: BackendCmd) {
        let mut msg = ChatMsg::Command { op, command: Box::new(command) };
        if let Some(tx) = self.chats.get(&chat) {
            match tx.send(msg) {
                Ok(()) => return,
                // The actor is gone (it panicked): start a fresh one.
                Err(mpsc::error::SendError(back)) => msg = back,
            }
        }
        let tx = Actor::spawn(chat.clone(), self.dir.clone(), self.events.clone());
        if tx.send(msg).is_err() {
            self.events.input(Input::Done { op, outcome: Outcome::Failed { message: "echo: the agent could not start".to_owned() } });
        }
        self.chats.insert(chat, tx);
    }
}

/// What a chat's actor is told.
enum ChatMsg {
    /// A command from the host.
    Command { op: OpId, command: Box<BackendCmd> },
    /// A turn task finished its turn: record it, then acknowledge so the
    /// task may send the turn's last action.
    Persist { turn_id: String, turn: Box<Turn>, ack: oneshot::Sender<()> },
    /// A turn task is about to report that the agent exited: record the
    /// turn as failed, then acknowledge so the task may report it.
    Crashed { turn_id: String, ack: oneshot::Sender<()> },
}

/// A running conversation.
struct Agent {
    conversation_id: String,
    header: Header,
    transcript: Vec<Turn>,
    running: Option<Running>,
    /// Whether the file on disk is this transcript in JSON lines ending in
    /// a whole line, so a finished turn is appended; otherwise (an earlier
    /// format, a failed append) the next save rewrites it whole.
    appendable: bool,
}

/// A turn in progress.
struct Running {
    turn_id: String,
    task: JoinHandle<()>,
    scratch: Arc<Mutex<ChatState>>,
    confirm: Option<oneshot::Sender<bool>>,
    /// Where the answer to the turn's question goes (`/ask`).
    answer: Option<oneshot::Sender<Answer>>,
    /// The steering message handed to the turn, taken at its next safe
    /// point (`BackendCmd::Steer`).
    steer: Arc<Mutex<Steer>>,
    started: Instant,
}

/// A running turn's steering slot: the newest message handed to it and
/// not taken yet, and how many it took (each gets a part of its own).
#[derive(Default)]
struct Steer {
    pending: Option<(String, ahp_types::state::Message)>,
    taken: u32,
}

/// A client's answer to the question of an `/ask` turn: the request as the
/// host holds it (answers merged) and what the client chose.
type Answer = (Box<ChatInputRequest>, ChatInputResponseKind);

struct Actor {
    chat: Uri,
    dir: PathBuf,
    events: EventSink,
    me: mpsc::WeakUnboundedSender<ChatMsg>,
    agent: Option<Agent>,
}

impl Actor {
    fn spawn(chat: Uri, dir: PathBuf, events: EventSink) -> mpsc::UnboundedSender<ChatMsg> {
        let (tx, rx) = mpsc::unbounded_channel();
        let actor = Actor { chat, dir, events, me: tx.downgrade(), agent: None };
        tokio::spawn(actor.run(rx));
        tx
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<ChatMsg>) {
        while let Some(msg) = rx.recv().await {
            match msg {
                ChatMsg::Command { op, command } => {
                    let outcome = self.command(*command).await;
                    self.events.input(Input::Done { op, outcome });
                }
                ChatMsg::Persist { turn_id, turn, ack } => {
                    let Some(agent) = self.agent.as_mut() else { continue };
                    if agent.running.as_ref().is_none_or(|r| r.turn_id != turn_id) {
                        // Cancelled or closed meanwhile: the task ends unheard.
                        continue;
                    }
                    agent.running = None;
                    agent.transcript.push(*turn);
                    self.save().await;
                    let _ = ack.send(());
                }
                ChatMsg::Crashed { turn_id, ack } => {
                    let running = self.agent.as_mut().and_then(|a| a.running.take_if(|r| r.turn_id == turn_id));
                    if let Some(running) = running {
                        // The conversation keeps the turn it died in,
                        // failed, written before the exit is told.
                        self.record_failed(&running.scratch, &turn_id, "echo: the agent exited mid-turn", elapsed_ms(running.started)).await;
                        self.agent = None;
                    }
                    let _ = ack.send(());
                }
            }
        }
        self.stop_turn(false).await;
    }

    async fn command(&mut self, command: BackendCmd) -> Outcome {
        match command {
            BackendCmd::Start { conversation_id, working_directory, resume, session, .. } => {
                self.stop_turn(false).await;
                self.agent = None;
                if !fsutil::is_safe_component(&conversation_id) {
                    return failed(format!("echo: refused conversation id {conversation_id:?}"));
                }
                let now = WallTime(wall_ms()).to_iso();
                let (header, history, appendable) = if resume {
                    match read_transcript(&self.dir, &conversation_id).await {
                        // The host's names for the conversation win over
                        // what the file says: they are what it runs under now.
                        Ok(stored) => (
                            Header {
                                session,
                                chat: self.chat.clone(),
                                title: stored.title,
                                working_directory: working_directory.or(stored.working_directory),
                                created_at: stored.created_at.unwrap_or_else(|| now.clone()),
                                modified_at: stored.modified_at.unwrap_or(now),
                            },
                            stored.turns,
                            stored.appendable,
                        ),
                        Err(ReadError::Damaged(detail)) => {
                            quarantine_transcript(&self.dir, &conversation_id, &detail).await;
                            return Outcome::TranscriptDamaged { detail };
                        }
                        Err(other) => return failed(other.message()),
                    }
                } else {
                    let header = Header {
                        session,
                        chat: self.chat.clone(),
                        title: String::new(),
                        working_directory,
                        created_at: now.clone(),
                        modified_at: now,
                    };
                    if let Err(message) = write_transcript(&self.dir, &conversation_id, &header, &[]).await {
                        return failed(message);
                    }
                    (header, Vec::new(), true)
                };
                self.agent = Some(Agent {
                    conversation_id: conversation_id.clone(),
                    header,
                    transcript: history.clone(),
                    running: None,
                    appendable,
                });
                Outcome::Started { conversation_id, history }
            }
            BackendCmd::Send { turn_id, message, attachments } => {
                if Directive::parse(&message.text) == Directive::Fail && self.agent.as_ref().is_some_and(|a| a.running.is_none()) {
                    // Refused, but had: the conversation keeps the turn as
                    // failed, so its history (and an export, and a restart)
                    // says what was asked and how it ended.
                    let scratch = Mutex::new(scratch_chat(&self.chat));
                    let started_at = WallTime(wall_ms()).to_iso();
                    apply(&scratch, &StateAction::ChatTurnStarted(ChatTurnStartedAction { turn_id: turn_id.clone(), started_at, message: Message::clone(&message), queued_message_id: None, meta: None }));
                    self.record_failed(&scratch, &turn_id, "echo: asked to fail", 0).await;
                    return failed("echo: asked to fail".to_owned());
                }
                self.send(turn_id, message, attachments)
            }
            BackendCmd::Cancel { turn_id } => {
                let running = self.agent.as_ref().and_then(|a| a.running.as_ref()).is_some_and(|r| r.turn_id == turn_id);
                if running {
                    self.stop_turn(true).await;
                }
                Outcome::Ok
            }
            BackendCmd::ConfirmTool { turn_id, tool_call_id: _, approved } => {
                if let Some(running) = self.agent.as_mut().and_then(|a| a.running.as_mut()).filter(|r| r.turn_id == turn_id) {
                    if let Some(confirm) = running.confirm.take() {
                        let _ = confirm.send(approved);
                    }
                }
                Outcome::Ok
            }
            BackendCmd::Answer { turn_id, request, response } => {
                if let Some(running) = self.agent.as_mut().and_then(|a| a.running.as_mut()).filter(|r| r.turn_id == turn_id) {
                    if let Some(answer) = running.answer.take() {
                        let _ = answer.send((request, response));
                    }
                }
                Outcome::Ok
            }
            BackendCmd::Steer { turn_id, id, message } => {
                // Held for the turn's next safe point; the newest replaces
                // one not taken yet. A turn that ended takes none.
                match self.agent.as_mut().and_then(|a| a.running.as_mut()).filter(|r| r.turn_id == turn_id) {
                    Some(running) => {
                        lock(&running.steer).pending = Some((id, message));
                        Outcome::Ok
                    }
                    None => failed(format!("echo: turn {turn_id} is not running")),
                }
            }
            BackendCmd::Close => {
                self.stop_turn(true).await;
                self.agent = None;
                Outcome::Ok
            }
            BackendCmd::Forget { conversation_id, turn_ids } => self.forget(conversation_id, turn_ids).await,
            BackendCmd::Resume { turn_id } => self.resume(turn_id),
            BackendCmd::Delete { conversation_id } => {
                self.stop_turn(false).await;
                self.agent = None;
                if !fsutil::is_safe_component(&conversation_id) {
                    return failed(format!("echo: refused conversation id {conversation_id:?}"));
                }
                let dir = self.dir.clone();
                let name = file_name(&conversation_id);
                match super::bulk::spawn(move || fsutil::remove_durable(&dir, &name)).await {
                    Ok(Ok(())) => Outcome::Ok,
                    Ok(Err(e)) => failed(format!("echo: could not delete conversation {conversation_id}: {e}")),
                    Err(e) => failed(format!("echo: delete task failed: {e}")),
                }
            }
        }
    }

    /// A rewind (`BackendCmd::Forget`): the conversation's transcript no
    /// longer holds turns `turn_ids`, rewritten whole and durably, so a
    /// resume or a restart shows the rewound history. The running agent's
    /// copy is the one rewritten when it holds the conversation; otherwise
    /// the file is read first. Nothing to forget (no such turn, no file)
    /// is done at once.
    async fn forget(&mut self, conversation_id: String, turn_ids: Vec<String>) -> Outcome {
        if !fsutil::is_safe_component(&conversation_id) {
            return failed(format!("echo: refused conversation id {conversation_id:?}"));
        }
        if let Some(agent) = self.agent.as_mut().filter(|a| a.conversation_id == conversation_id) {
            let before = agent.transcript.len();
            agent.transcript.retain(|t| !turn_ids.contains(&t.id));
            if agent.transcript.len() == before {
                return Outcome::Ok;
            }
            agent.header.modified_at = WallTime(wall_ms()).to_iso();
            let written = write_transcript(&self.dir, &conversation_id, &agent.header, &agent.transcript).await;
            agent.appendable = written.is_ok();
            return match written {
                Ok(()) => Outcome::Ok,
                Err(message) => failed(message),
            };
        }
        forget_in_file(&self.dir, &self.chat, &conversation_id, &turn_ids).await
    }

    fn send(&mut self, turn_id: String, message: Arc<Message>, attachments: AttachmentReads) -> Outcome {
        let Some(agent) = self.agent.as_mut() else {
            return failed("echo: the agent for this chat is not running".to_owned());
        };
        if agent.running.is_some() {
            return failed("echo: a turn is already running in this chat".to_owned());
        }
        let directive = Directive::parse(&message.text);
        if directive == Directive::Fail {
            return failed("echo: asked to fail".to_owned());
        }
        let Some(me) = self.me.upgrade() else {
            return failed("echo: the agent is shutting down".to_owned());
        };
        let scratch = Arc::new(Mutex::new(scratch_chat(&self.chat)));
        let started_at = WallTime(wall_ms()).to_iso();
        apply(
            &scratch,
            &StateAction::ChatTurnStarted(ChatTurnStartedAction {
                turn_id: turn_id.clone(),
                started_at,
                message: Message::clone(&message),
                queued_message_id: None,
                meta: None,
            }),
        );
        let (confirm_tx, confirm_rx) = oneshot::channel();
        let (answer_tx, answer_rx) = oneshot::channel();
        let steer = Arc::new(Mutex::new(Steer::default()));
        let started = Instant::now();
        let ctx = TurnCtx {
            chat: self.chat.clone(),
            turn_id: turn_id.clone(),
            message,
            attachments,
            events: self.events.clone(),
            actor: me,
            scratch: scratch.clone(),
            steer: steer.clone(),
            started,
            workdir: agent.header.working_directory.as_deref().and_then(ahpd_core::awareness::uri_to_path).map(PathBuf::from),
        };
        let task = tokio::spawn(ctx.run(directive, confirm_rx, answer_rx));
        agent.running = Some(Running { turn_id, task, scratch, confirm: Some(confirm_tx), answer: Some(answer_tx), steer, started });
        Outcome::Ok
    }

    /// Resumes turn `turn_id` (`chat/turnResume`): it must be the
    /// conversation's last turn, ended in a resumable error, with nothing
    /// running. The turn leaves the in-memory transcript (the file keeps
    /// it as errored until the resumed turn ends, and the next save
    /// rewrites the file whole, so the turn is never there twice) and runs
    /// again from its own reopened copy.
    fn resume(&mut self, turn_id: String) -> Outcome {
        let Some(agent) = self.agent.as_mut() else {
            return failed("echo: the agent for this chat is not running".to_owned());
        };
        if agent.running.is_some() {
            return failed("echo: a turn is already running in this chat".to_owned());
        }
        let resumable = agent.transcript.last().is_some_and(|t| {
            t.id == turn_id && matches!(t.response_parts.last(), Some(ResponsePart::Error(e)) if e.resumable == Some(true))
        });
        if !resumable {
            return failed(format!("echo: turn {turn_id} is not the last turn ended in a resumable error"));
        }
        let Some(me) = self.me.upgrade() else {
            return failed("echo: the agent is shutting down".to_owned());
        };
        let Some(turn) = agent.transcript.pop() else { return failed("echo: no turn to resume".to_owned()) };
        agent.appendable = false;
        let message = Arc::new(turn.message.clone());
        let mut chat = scratch_chat(&self.chat);
        chat.turns.push(turn);
        let scratch = Arc::new(Mutex::new(chat));
        apply(&scratch, &StateAction::ChatTurnResume(ahp_types::actions::ChatTurnResumeAction { turn_id: turn_id.clone() }));
        let (confirm_tx, confirm_rx) = oneshot::channel();
        let (answer_tx, answer_rx) = oneshot::channel();
        let steer = Arc::new(Mutex::new(Steer::default()));
        let started = Instant::now();
        let ctx = TurnCtx {
            chat: self.chat.clone(),
            turn_id: turn_id.clone(),
            message,
            // Named when the turn first ran; its resumed part does not
            // read them again.
            attachments: AttachmentReads::default(),
            events: self.events.clone(),
            actor: me,
            scratch: scratch.clone(),
            steer: steer.clone(),
            started,
            workdir: None,
        };
        let task = tokio::spawn(ctx.run(Directive::Resumed, confirm_rx, answer_rx));
        agent.running = Some(Running { turn_id, task, scratch, confirm: Some(confirm_tx), answer: Some(answer_tx), steer, started });
        Outcome::Ok
    }

    /// Stops the running turn, if any; with `record`, the turn goes into the
    /// transcript as cancelled with whatever it had streamed.
    async fn stop_turn(&mut self, record: bool) {
        let Some(agent) = self.agent.as_mut() else { return };
        let Some(running) = agent.running.take() else { return };
        running.task.abort();
        if !record {
            return;
        }
        let duration = elapsed_ms(running.started);
        // Its open question is cancelled with it, as the host cancels it.
        let cancels = ahpd_core::session::questions::cancel_actions(&lock(&running.scratch));
        for cancel in &cancels {
            apply(&running.scratch, cancel);
        }
        apply(
            &running.scratch,
            &StateAction::ChatTurnCancelled(ChatTurnCancelledAction { turn_id: running.turn_id.clone(), duration, meta: None }),
        );
        if let Some(turn) = finished_turn(&running.scratch, &running.turn_id) {
            agent.transcript.push(turn);
            self.save().await;
        }
    }

    /// Ends turn `turn_id` of `scratch` in an error (`message`, not
    /// resumable) and writes it into the conversation's transcript.
    async fn record_failed(&mut self, scratch: &Mutex<ChatState>, turn_id: &str, message: &str, duration: i64) {
        apply(
            scratch,
            &StateAction::ChatError(ChatErrorAction {
                turn_id: turn_id.to_owned(),
                duration,
                part: ErrorResponsePart {
                    error: ErrorInfo { error_type: "echoError".to_owned(), message: message.to_owned(), stack: None, meta: None },
                    resumable: Some(false),
                },
                meta: None,
            }),
        );
        let Some(turn) = finished_turn(scratch, turn_id) else { return };
        let Some(agent) = self.agent.as_mut() else { return };
        agent.transcript.push(turn);
        self.save().await;
    }

    /// Records the conversation's newest turn in its transcript: appended
    /// (one fsync) when the file allows, else the whole file rewritten. A
    /// failure is logged (the turn was still had) and the next save
    /// rewrites the whole file. The first turn's message names a
    /// conversation that has no title yet.
    async fn save(&mut self) {
        let Some(agent) = self.agent.as_mut() else { return };
        agent.header.modified_at = WallTime(wall_ms()).to_iso();
        if agent.header.title.is_empty() {
            if let Some(first) = agent.transcript.first() {
                agent.header.title = ahpd_core::transcript::clean_title(&first.message.text);
            }
        }
        let saved = match agent.transcript.pop() {
            // The turn goes to the writing thread and comes back: the
            // actor does nothing else meanwhile, and a copy of a turn of
            // megabytes was a millisecond on a runtime worker (issue 25).
            Some(turn) if agent.appendable => {
                let (saved, turn) = append_turn(&self.dir, &agent.conversation_id, &agent.header, turn).await;
                agent.transcript.extend(turn);
                saved
            }
            last => {
                agent.transcript.extend(last);
                write_transcript(&self.dir, &agent.conversation_id, &agent.header, &agent.transcript).await
            }
        };
        agent.appendable = saved.is_ok();
        if let Err(message) = saved {
            tracing::warn!(chat = %self.chat, detail = %message, "echo transcript not saved");
        }
    }
}

/// One turn being streamed.
struct TurnCtx {
    chat: Uri,
    turn_id: String,
    /// The person's message (shared with the host's record of the turn).
    message: Arc<Message>,
    events: EventSink,
    actor: mpsc::UnboundedSender<ChatMsg>,
    scratch: Arc<Mutex<ChatState>>,
    /// The turn's steering slot, shared with the actor.
    steer: Arc<Mutex<Steer>>,
    started: Instant,
    /// The chat's working directory, if any (for `/write`).
    workdir: Option<PathBuf>,
    /// The files the message attaches, to read and name in the reply.
    attachments: AttachmentReads,
}

impl TurnCtx {
    /// The person's message's text.
    fn text(&self) -> &str {
        &self.message.text
    }

    /// The files the message attaches, read as an ACP agent's are
    /// (`exec::fs::read_attachments`: within the session's folders) and
    /// named: `\n\nAttached: notes.md (6 bytes), x (not read: ...)`;
    /// empty when it attaches none.
    async fn attached(&self) -> String {
        if self.attachments.is_empty() {
            return String::new();
        }
        let reads = self.attachments.clone();
        let read = tokio::task::spawn_blocking(move || crate::exec::fs::read_attachments(&reads)).await.unwrap_or_default();
        let named: Vec<String> = read
            .into_iter()
            .map(|a| match a.body {
                AttachmentBody::Text { text, .. } => format!("{} ({} bytes)", a.label, text.len()),
                AttachmentBody::Blob { data, .. } => format!("{} ({} bytes)", a.label, data.len()),
                AttachmentBody::Unread(why) => format!("{} ({})", a.label, why.words()),
            })
            .collect();
        format!("\n\nAttached: {}", named.join(", "))
    }

    async fn run(self, directive: Directive, confirm: oneshot::Receiver<bool>, answer: oneshot::Receiver<Answer>) {
        let reply = format!("Echo: {}{}", self.text(), self.attached().await);
        match directive {
            Directive::Plain | Directive::Fail => {
                self.stream(&reply, CHUNK_DELAY_MS * MAX_CHUNKS as u64).await;
                self.complete().await;
            }
            Directive::Slow(ms) => {
                self.stream(&reply, ms).await;
                self.complete().await;
            }
            Directive::Busy(ms) => {
                self.event(BackendEvent::Busy(true));
                tokio::time::sleep(Duration::from_millis(ms)).await;
                self.event(BackendEvent::Busy(false));
                self.stream(&reply, CHUNK_DELAY_MS * MAX_CHUNKS as u64).await;
                self.complete().await;
            }
            Directive::Resumed => {
                let part_id = format!("{}.resumed", self.turn_id);
                self.stream_in(&part_id, &format!("Echo (resumed): {}", self.text()), CHUNK_DELAY_MS * MAX_CHUNKS as u64).await;
                self.complete().await;
            }
            Directive::Error => {
                self.stream(&reply, CHUNK_DELAY_MS * MAX_CHUNKS as u64).await;
                let action = StateAction::ChatError(ChatErrorAction {
                    turn_id: self.turn_id.clone(),
                    duration: elapsed_ms(self.started),
                    part: ErrorResponsePart {
                        error: ErrorInfo {
                            error_type: "echoError".to_owned(),
                            message: "echo: asked to end the turn in an error".to_owned(),
                            stack: None,
                            meta: None,
                        },
                        resumable: Some(true),
                    },
                    meta: None,
                });
                self.finish(action).await;
            }
            Directive::Crash => {
                tokio::time::sleep(Duration::from_millis(CHUNK_DELAY_MS)).await;
                let (ack, written) = oneshot::channel();
                let _ = self.actor.send(ChatMsg::Crashed { turn_id: self.turn_id.clone(), ack });
                let _ = written.await;
                self.event(BackendEvent::Exited { message: "echo: asked to crash".to_owned() });
            }
            Directive::Write => self.write_file(confirm).await,
            Directive::Tool => {
                let reply = match tool_request(self.text()) {
                    Ok(request) => match self.events.host_tool(self.chat.clone(), request).await {
                        Ok(answer) => format!("Echo: tool answered: {answer}"),
                        Err(e) => format!("Echo: tool refused: {e}"),
                    },
                    Err(usage) => format!("Echo: {usage}"),
                };
                self.stream(&reply, CHUNK_DELAY_MS).await;
                self.complete().await;
            }
            Directive::Ask => self.ask(answer).await,
            Directive::Approve => {
                let tool_call_id = format!("{}.tool", self.turn_id);
                self.emit(StateAction::ChatToolCallStart(ChatToolCallStartAction {
                    turn_id: self.turn_id.clone(),
                    tool_call_id: tool_call_id.clone(),
                    meta: None,
                    tool_name: TOOL_NAME.to_owned(),
                    display_name: "Echo tool".to_owned(),
                    intention: Some("Echo the message back".to_owned()),
                    contributor: None,
                }));
                self.emit(StateAction::ChatToolCallReady(ChatToolCallReadyAction {
                    turn_id: self.turn_id.clone(),
                    tool_call_id: tool_call_id.clone(),
                    meta: None,
                    contributor: None,
                    intention: None,
                    invocation_message: StringOrMarkdown::Plain("Echo the message back".to_owned()),
                    tool_input: None,
                    confirmation_title: Some(StringOrMarkdown::Plain("Run the echo tool?".to_owned())),
                    risk_assessment: None,
                    edits: None,
                    editable: None,
                    confirmed: None,
                    options: None,
                }));
                // A cancelled or closed turn drops the sender: end quietly.
                let Ok(approved) = confirm.await else { return };
                if approved {
                    tokio::time::sleep(Duration::from_millis(CHUNK_DELAY_MS)).await;
                    self.emit(StateAction::ChatToolCallComplete(ChatToolCallCompleteAction {
                        turn_id: self.turn_id.clone(),
                        tool_call_id,
                        meta: None,
                        result: ToolCallResult {
                            success: true,
                            past_tense_message: StringOrMarkdown::Plain("Echoed the message".to_owned()),
                            content: None,
                            structured_content: None,
                            error: None,
                        },
                        requires_result_confirmation: None,
                    }));
                    self.stream(&reply, CHUNK_DELAY_MS * MAX_CHUNKS as u64).await;
                } else {
                    self.stream("Echo: tool denied", CHUNK_DELAY_MS * MAX_CHUNKS as u64).await;
                }
                self.complete().await;
            }
        }
    }

    /// `/ask <question>`: asks it as one text question and waits for the
    /// answer, then says what it was. The answer is applied to the turn's
    /// own copy as the host applied it, so the transcript keeps the
    /// question answered.
    async fn ask(&self, answer: oneshot::Receiver<Answer>) {
        let question = self.text().trim_start().strip_prefix("/ask").unwrap_or_default().trim();
        let question = if question.is_empty() { "What should I echo?" } else { question };
        let request: ChatInputRequest = match serde_json::from_value(serde_json::json!({
            "id": format!("{}.ask", self.turn_id),
            "message": question,
            "questions": [{"kind": "text", "id": ASK_QUESTION_ID, "message": question}],
        })) {
            Ok(r) => r,
            Err(e) => {
                self.stream(&format!("Echo: cannot ask: {e}"), CHUNK_DELAY_MS).await;
                return self.complete().await;
            }
        };
        self.emit(StateAction::ChatInputRequested(ChatInputRequestedAction { request }));
        // A cancelled or closed turn drops the sender: end quietly.
        let Ok((request, response)) = answer.await else { return };
        apply(
            &self.scratch,
            &StateAction::ChatInputCompleted(ChatInputCompletedAction { request_id: request.id.clone(), response, answers: request.answers.clone() }),
        );
        let reply = match response {
            ChatInputResponseKind::Accept => {
                let text = request.answers.as_ref().and_then(|a| a.get(ASK_QUESTION_ID)).and_then(|a| match a {
                    ChatInputAnswer::Submitted(v) | ChatInputAnswer::Draft(v) => match &v.value {
                        ChatInputAnswerValue::Text(t) => Some(t.value.clone()),
                        other => serde_json::to_value(other).ok().and_then(|v| v.get("value").map(|x| x.to_string())),
                    },
                    ChatInputAnswer::Skipped(_) => None,
                });
                match text {
                    Some(text) => format!("Echo: {text}"),
                    None => "Echo: you accepted without an answer".to_owned(),
                }
            }
            ChatInputResponseKind::Decline => "Echo: you declined to answer".to_owned(),
            ChatInputResponseKind::Cancel => "Echo: you cancelled the question".to_owned(),
        };
        self.stream(&reply, CHUNK_DELAY_MS * MAX_CHUNKS as u64).await;
        self.complete().await;
    }

    /// `/write <path> [text]`: a declared write that waits for the host's
    /// word, then writes `text` (or a fixed line) and a newline.
    async fn write_file(&self, confirm: oneshot::Receiver<bool>) {
        let mut words = self.text().trim_start().splitn(3, char::is_whitespace);
        let _directive = words.next();
        let rel = words.next().unwrap_or_default().to_owned();
        let content = match words.next().map(str::trim) {
            Some(text) if !text.is_empty() => format!("{text}\n"),
            _ => "written by the echo agent\n".to_owned(),
        };
        let target = match write_target(self.workdir.as_deref(), &rel) {
            Ok(t) => t,
            Err(message) => {
                self.stream(&format!("Echo: cannot write: {message}"), CHUNK_DELAY_MS).await;
                return self.complete().await;
            }
        };
        let tool_call_id = format!("{}.write", self.turn_id);
        let mut meta = serde_json::Map::new();
        meta.insert(ahpd_core::awareness::WRITES_META_KEY.to_owned(), serde_json::json!([target.display().to_string()]));
        self.emit(StateAction::ChatToolCallStart(ChatToolCallStartAction {
            turn_id: self.turn_id.clone(),
            tool_call_id: tool_call_id.clone(),
            meta: None,
            tool_name: "write_file".to_owned(),
            display_name: "Write file".to_owned(),
            intention: Some(format!("Write {rel}")),
            contributor: None,
        }));
        self.emit(StateAction::ChatToolCallReady(ChatToolCallReadyAction {
            turn_id: self.turn_id.clone(),
            tool_call_id: tool_call_id.clone(),
            meta: Some(meta),
            contributor: None,
            intention: None,
            invocation_message: StringOrMarkdown::Plain(format!("Write {rel}")),
            tool_input: None,
            confirmation_title: None,
            risk_assessment: None,
            edits: None,
            editable: None,
            confirmed: Some(ahp_types::state::ToolCallConfirmationReason::NotNeeded),
            options: None,
        }));
        let Ok(approved) = confirm.await else { return };
        if !approved {
            self.stream("Echo: tool denied", CHUNK_DELAY_MS * MAX_CHUNKS as u64).await;
            return self.complete().await;
        }
        let written = match self.workdir.as_deref() {
            Some(workdir) => write_line(workdir, &target, &content).await,
            None => Err("the chat has no working directory".to_owned()),
        };
        if written.is_ok() {
            self.event(BackendEvent::Wrote { paths: vec![target.display().to_string()] });
        }
        self.emit(StateAction::ChatToolCallComplete(ChatToolCallCompleteAction {
            turn_id: self.turn_id.clone(),
            tool_call_id,
            meta: None,
            result: ToolCallResult {
                success: written.is_ok(),
                past_tense_message: StringOrMarkdown::Plain(match &written {
                    Ok(()) => format!("Wrote {rel}"),
                    Err(e) => format!("Could not write {rel}: {e}"),
                }),
                content: None,
                structured_content: None,
                error: None,
            },
            requires_result_confirmation: None,
        }));
        self.stream(&format!("Echo: wrote {rel}"), CHUNK_DELAY_MS * MAX_CHUNKS as u64).await;
        self.complete().await;
    }

    /// Applies `action` to the turn's own copy and sends it to the host.
    fn emit(&self, action: StateAction) {
        apply(&self.scratch, &action);
        self.event(BackendEvent::Action(action));
    }

    fn event(&self, event: BackendEvent) {
        self.events.input(Input::Backend { chat: self.chat.clone(), event });
    }

    /// A markdown part, then `text` in up to four deltas spread over
    /// `over_ms`.
    async fn stream(&self, text: &str, over_ms: u64) {
        self.stream_in(&format!("{}.md", self.turn_id), text, over_ms).await;
    }

    /// A markdown part `part_id`, then `text` in up to four deltas spread
    /// over `over_ms`.
    async fn stream_in(&self, part_id: &str, text: &str, over_ms: u64) {
        let part_id = part_id.to_owned();
        self.emit(StateAction::ChatResponsePart(ChatResponsePartAction {
            turn_id: self.turn_id.clone(),
            part: ResponsePart::Markdown(MarkdownResponsePart { id: part_id.clone(), content: String::new() }),
            meta: None,
        }));
        let chunks = chunks(text, MAX_CHUNKS);
        let delay = over_ms / (chunks.len().max(1) as u64);
        for chunk in chunks {
            // `/slow 0` streams at once: a zero sleep still waits for the
            // timer's next 1 ms tick, which made each of its chunks ~1 ms
            // late (and a benchmark's turn ~4 ms longer than its work).
            if delay > 0 {
                tokio::time::sleep(Duration::from_millis(delay)).await;
            } else {
                tokio::task::yield_now().await;
            }
            self.take_steering();
            self.emit(StateAction::ChatDelta(ChatDeltaAction {
                turn_id: self.turn_id.clone(),
                part_id: part_id.clone(),
                content: chunk,
                meta: None,
            }));
        }
    }

    /// A safe point between two chunks of a reply: a steering message
    /// handed to the turn is taken here (`BackendEvent::SteeringTaken`,
    /// before anything it causes) and answered in a part of its own,
    /// `Echo (steered): <message>`.
    fn take_steering(&self) {
        let (id, message, n) = {
            let mut slot = lock(&self.steer);
            let Some((id, message)) = slot.pending.take() else { return };
            slot.taken += 1;
            (id, message, slot.taken)
        };
        self.event(BackendEvent::SteeringTaken { turn_id: self.turn_id.clone(), id });
        let part_id = format!("{}.steered.{n}", self.turn_id);
        self.emit(StateAction::ChatResponsePart(ChatResponsePartAction {
            turn_id: self.turn_id.clone(),
            part: ResponsePart::Markdown(MarkdownResponsePart { id: part_id.clone(), content: String::new() }),
            meta: None,
        }));
        self.emit(StateAction::ChatDelta(ChatDeltaAction {
            turn_id: self.turn_id.clone(),
            part_id,
            content: format!("Echo (steered): {}", message.text),
            meta: None,
        }));
    }

    async fn complete(&self) {
        let action = StateAction::ChatTurnComplete(ChatTurnCompleteAction {
            turn_id: self.turn_id.clone(),
            duration: elapsed_ms(self.started),
            meta: None,
        });
        self.finish(action).await;
    }

    /// Ends the turn with `action`: record it in the transcript first, then
    /// tell the host. A turn cancelled meanwhile ends unheard.
    async fn finish(&self, action: StateAction) {
        apply(&self.scratch, &action);
        let Some(turn) = finished_turn(&self.scratch, &self.turn_id) else { return };
        let (ack, acked) = oneshot::channel();
        let persist = ChatMsg::Persist { turn_id: self.turn_id.clone(), turn: Box::new(turn), ack };
        if self.actor.send(persist).is_err() || acked.await.is_err() {
            return;
        }
        self.event(BackendEvent::Action(action));
    }
}

/// The directive a message starts with, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Directive {
    Plain,
    Fail,
    Error,
    Slow(u64),
    Approve,
    Crash,
    Busy(u64),
    Write,
    /// Not a message's: a resumed turn goes on (`BackendCmd::Resume`).
    Resumed,
    Ask,
    /// A host tool call (`/wake`, `/send`, `/peers`, ...).
    Tool,
}

impl Directive {
    fn parse(text: &str) -> Directive {
        let mut words = text.split_whitespace();
        let ms = |word: Option<&str>, default: u64| word.and_then(|w| w.parse::<u64>().ok()).unwrap_or(default).min(MAX_DIRECTIVE_MS);
        match words.next() {
            Some("/fail") => Directive::Fail,
            Some("/error") => Directive::Error,
            Some("/approve") => Directive::Approve,
            Some("/write") => Directive::Write,
            Some("/ask") => Directive::Ask,
            Some("/crash") => Directive::Crash,
            Some("/slow") => Directive::Slow(ms(words.next(), 2_000)),
            Some("/busy") => Directive::Busy(ms(words.next(), 1_000)),
            Some("/wake" | "/wake-at" | "/unwake" | "/send" | "/peers" | "/child" | "/child-status") => Directive::Tool,
            _ => Directive::Plain,
        }
    }
}

/// The host tool call a `/wake`, `/wake-at`, `/unwake`, `/send`,
/// `/peers`, `/child` or `/child-status` message asks for.
///
/// Errors: the usage of the directive, when its words do not read.
fn tool_request(text: &str) -> Result<HostToolRequest, String> {
    let text = text.trim_start();
    let (directive, rest) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
    let rest = rest.trim_start();
    let (first, tail) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let tail = tail.trim().to_owned();
    match directive {
        "/wake" => match first.parse::<u64>() {
            Ok(secs) => Ok(HostToolRequest::ScheduleWakeup { after_seconds: Some(secs), at: None, prompt: tail }),
            Err(_) => Err("usage: /wake <seconds> <prompt>".to_owned()),
        },
        "/wake-at" if !first.is_empty() => Ok(HostToolRequest::ScheduleWakeup { after_seconds: None, at: Some(first.to_owned()), prompt: tail }),
        "/wake-at" => Err("usage: /wake-at <RFC 3339 time> <prompt>".to_owned()),
        "/unwake" if !first.is_empty() => Ok(HostToolRequest::CancelWakeup { id: first.to_owned() }),
        "/unwake" => Err("usage: /unwake <wake id>".to_owned()),
        "/send" if !first.is_empty() => Ok(HostToolRequest::SendMessage { session: first.to_owned(), text: tail }),
        "/send" => Err("usage: /send <session URI> <text>".to_owned()),
        "/peers" => Ok(HostToolRequest::ListPeers),
        "/child" if !first.is_empty() => Ok(HostToolRequest::StartChildSession { provider: first.to_owned(), prompt: tail, working_directory: None }),
        "/child" => Err("usage: /child <provider> <prompt>".to_owned()),
        "/child-status" if !first.is_empty() => Ok(HostToolRequest::ChildStatus { child: first.to_owned() }),
        _ => Err("usage: /child-status <session URI>".to_owned()),
    }
}

/// Where `/write <rel>` writes: `rel` under `workdir`, made only of plain
/// components.
///
/// Errors: no working directory, an empty, absolute or `..` path.
fn write_target(workdir: Option<&Path>, rel: &str) -> Result<PathBuf, String> {
    let workdir = workdir.ok_or("the chat has no working directory")?;
    let path = Path::new(rel);
    if rel.is_empty() || !path.components().all(|c| matches!(c, std::path::Component::Normal(_))) {
        return Err(format!("{rel:?} is not a plain relative path"));
    }
    Ok(workdir.join(path))
}

/// Writes `content` to `target`, creating its folders; refuses a target
/// whose folder resolves outside `workdir` (a symlink).
async fn write_line(workdir: &Path, target: &Path, content: &str) -> Result<(), String> {
    let parent = target.parent().ok_or("no parent folder")?;
    tokio::fs::create_dir_all(parent).await.map_err(|e| e.to_string())?;
    let resolved = tokio::fs::canonicalize(parent).await.map_err(|e| e.to_string())?;
    let root = tokio::fs::canonicalize(workdir).await.map_err(|e| e.to_string())?;
    if !resolved.starts_with(&root) {
        return Err(format!("{} resolves outside the working directory", parent.display()));
    }
    tokio::fs::write(target, content.as_bytes()).await.map_err(|e| e.to_string())
}

/// `text` cut into at most `max` non-empty pieces on character boundaries,
/// each (but the last) at least `text.len() / max` bytes. Cut by bytes, not
/// by `char`s: a 900 KB reply made a 3.6 MB vector of `char`s and built
/// every piece a character at a time (issue 25, the soak's profile).
fn chunks(text: &str, max: usize) -> Vec<String> {
    let size = text.len().div_ceil(max.max(1)).max(1);
    let mut pieces = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut at = size.min(rest.len());
        while !rest.is_char_boundary(at) {
            at += 1;
        }
        let (piece, tail) = rest.split_at(at);
        pieces.push(piece.to_owned());
        rest = tail;
    }
    pieces
}

fn failed(message: String) -> Outcome {
    Outcome::Failed { message }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn apply(scratch: &Mutex<ChatState>, action: &StateAction) {
    let _ = apply_action_to_chat(&mut lock(scratch), action);
}

/// The turn `turn_id` once the reducer has moved it into `turns`.
fn finished_turn(scratch: &Mutex<ChatState>, turn_id: &str) -> Option<Turn> {
    lock(scratch).turns.iter().rev().find(|t| t.id == turn_id).cloned()
}

fn elapsed_ms(since: Instant) -> i64 {
    i64::try_from(since.elapsed().as_millis()).unwrap_or(i64::MAX)
}

fn wall_ms() -> i64 {
    crate::driver::wall_ms()
}

/// An empty chat the turn task applies its own actions to, so the finished
/// turn is exactly what the reducers make of what was sent.
fn scratch_chat(chat: &Uri) -> ChatState {
    ChatState {
        resource: chat.clone(),
        title: String::new(),
        status: 1,
        activity: None,
        modified_at: WallTime(wall_ms()).to_iso(),
        changes: None,
        origin: None,
        movable: None,
        interactivity: None,
        working_directories: None,
        changesets: None,
        background_work: None,
        canvases: None,
        turns: Vec::new(),
        turns_next_cursor: None,
        active_turn: None,
        steering_message: None,
        queued_messages: None,
        draft: None,
        meta: None,
    }
}

/// A rewind's forget with no agent holding the conversation: its
/// transcript in `dir` is read, and written again whole and durably without
/// turns `turn_ids` (the header as the file says, `chat` when it names
/// none). No file, or no such turn, is nothing to forget.
async fn forget_in_file(dir: &Path, chat: &Uri, conversation_id: &str, turn_ids: &[String]) -> Outcome {
    if !dir.join(file_name(conversation_id)).exists() {
        return Outcome::Ok;
    }
    let stored = match read_transcript(dir, conversation_id).await {
        Ok(stored) => stored,
        Err(e) => return failed(e.message()),
    };
    let mut turns = stored.turns;
    let before = turns.len();
    turns.retain(|t| !turn_ids.contains(&t.id));
    if turns.len() == before {
        return Outcome::Ok;
    }
    let now = WallTime(wall_ms()).to_iso();
    let header = Header {
        session: stored.session.unwrap_or_default(),
        chat: stored.chat.unwrap_or_else(|| chat.clone()),
        title: stored.title,
        working_directory: stored.working_directory,
        created_at: stored.created_at.unwrap_or_else(|| now.clone()),
        modified_at: now,
    };
    match write_transcript(dir, conversation_id, &header, &turns).await {
        Ok(()) => Outcome::Ok,
        Err(message) => failed(message),
    }
}

/// Why a transcript could not be read ([`read_transcript`]).
#[derive(Debug)]
enum ReadError {
    /// It is there but does not parse, or cannot be read: what was wrong,
    /// naming no server path (the path goes to the log).
    Damaged(String),
    /// Anything else (no such conversation, the task failed), as words for
    /// the host, naming no server path.
    Other(String),
}

impl ReadError {
    /// The words for the host (`Outcome::Failed`), with no server path.
    fn message(self) -> String {
        match self {
            ReadError::Damaged(detail) => format!("echo: the transcript cannot be read back: {detail}"),
            ReadError::Other(message) => message,
        }
    }
}

/// Reads a conversation's transcript: its header fields and its turns.
///
/// Errors: missing, unreadable or unparsable, as a message a person can act
/// on; no message names a server path (issue 25: they reach remote clients),
/// the log line does.
async fn read_transcript(dir: &Path, conversation_id: &str) -> Result<FileIn<Turn>, ReadError> {
    let path = dir.join(file_name(conversation_id));
    let shown = path.display().to_string();
    let read = super::bulk::spawn(move || std::fs::read(&path)).await;
    let result = match read {
        Ok(Ok(bytes)) => echo_transcript::parse(&bytes).map_err(ReadError::Damaged),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ReadError::Other(format!("echo: no conversation {conversation_id} to resume")))
        }
        Ok(Err(e)) => Err(ReadError::Damaged(e.kind().to_string())),
        Err(e) => return Err(ReadError::Other(format!("echo: read task failed: {e}"))),
    };
    if let Err(ReadError::Damaged(detail)) = &result {
        tracing::warn!(file = %shown, "echo transcript cannot be read back: {detail}");
    }
    result
}

/// Moves a damaged transcript aside as the store does a damaged record
/// (`<name>.corrupt-<ms>`, never over an earlier one), so that it is kept
/// for whoever restores it and a resume no longer reads it (issue 25). Run
/// by the chat's own actor, the file's only writer.
async fn quarantine_transcript(dir: &Path, conversation_id: &str, detail: &str) {
    let dir = dir.to_owned();
    let name = file_name(conversation_id);
    let (at, detail) = (wall_ms(), detail.to_owned());
    let _ = super::bulk::spawn(move || fsutil::quarantine(&dir, &name, at, "an echo transcript cannot be read back", &detail)).await;
}

/// Replaces a conversation's transcript durably (file and directory
/// fsynced), in JSON lines.
///
/// Errors: encoding or IO, as a message.
async fn write_transcript(dir: &Path, conversation_id: &str, header: &Header, turns: &[Turn]) -> Result<(), String> {
    let bytes = echo_transcript::encode(header, turns).map_err(|e| format!("echo: could not encode transcript: {e}"))?;
    let dir = dir.to_owned();
    let name = file_name(conversation_id);
    match super::bulk::spawn(move || fsutil::write_durable(&dir, &name, &bytes, None)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("echo: could not write transcript for {conversation_id}: {e}")),
        Err(e) => Err(format!("echo: write task failed: {e}")),
    }
}

/// Appends `turn` to a conversation's transcript durably (one fsync of the
/// file, which exists already).
///
/// Errors: encoding or IO, as a message; the file may then end in part of
/// a line, so the caller rewrites it whole next time.
///
/// Encoded on the bulk thread that writes it, which borrows the turn and
/// hands it back (with it, the result): encoding a turn of megabytes on
/// the runtime's workers held up every connection's reader and writer
/// queued behind it (issue 25). The turn comes back whatever happened
/// (`None` only if the runtime cancelled the task, at shutdown).
async fn append_turn(dir: &Path, conversation_id: &str, header: &Header, turn: Turn) -> (Result<(), String>, Option<Turn>) {
    let path = dir.join(file_name(conversation_id));
    let (header, id) = (header.clone(), conversation_id.to_owned());
    let append = move || {
        // Caught here so the turn always comes back: the caller holds no
        // other copy of it.
        let write = std::panic::AssertUnwindSafe(|| match echo_transcript::encode_turn(&header, &turn) {
            Ok(bytes) => fsutil::append_durable(&path, &bytes).map_err(|e| format!("echo: could not append to the transcript of {id}: {e}")),
            Err(e) => Err(format!("echo: could not encode a turn: {e}")),
        });
        let result = std::panic::catch_unwind(write).unwrap_or_else(|_| Err("echo: writing the transcript panicked".to_owned()));
        (result, turn)
    };
    match super::bulk::spawn(append).await {
        Ok((result, turn)) => (result, Some(turn)),
        Err(e) => (Err(format!("echo: write task failed: {e}")), None),
    }
}

/// One pass over the echo agent's transcripts in `dir` for the catalogue:
/// one row per conversation that has at least one turn (a conversation
/// started and never spoken in is a session the host never listed). Its
/// session and chat are the ones the file names, or, for a file in the
/// first format, the ones its name implies (`<scheme>@<id>.json` is the
/// default chat of `<scheme>:/<id>`); a file that names neither is skipped.
/// Times come from the file, else its mtime. A session's default chat's
/// row comes before its other chats' rows.
///
/// Errors: the directory cannot be listed. A file that cannot be read or
/// parsed is skipped, logged with its path, and its conversation reported
/// in [`Scan::damaged`] (issue 25: the host marks the chat that holds it;
/// the file is moved aside only by the chat's own actor, when a resume
/// reads it, since a pass runs beside the writers).
pub fn scan(dir: &Path) -> Result<Scan, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("echo: could not list {}: {e}", dir.display()))?;
    let mut rows: Vec<(bool, ScannedRow)> = Vec::new();
    let mut damaged: Vec<String> = Vec::new();
    let mut skipped = 0usize;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(stem) = name.strip_suffix(".json") else { continue };
        if !fsutil::is_safe_component(name) || name.contains(fsutil::TEMP_MARKER) || !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        match echo_transcript::scan_row(&entry.path(), stem) {
            Ok(Some(row)) => {
                let default_chat = row.session.as_deref().and_then(store_key_of).is_some_and(|key| key == stem);
                rows.push((default_chat, row));
            }
            Ok(None) => {}
            // Gone since the listing (a dispose, a move aside): nothing
            // is damaged.
            Err(_) if !entry.path().exists() => {}
            Err(message) => {
                skipped += 1;
                tracing::warn!(file = %entry.path().display(), "echo transcript skipped by the scan: {message}");
                damaged.push(stem.to_owned());
            }
        }
    }
    if skipped > 0 {
        tracing::warn!(skipped, "echo: transcripts the scan could not read");
    }
    rows.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.conversation_id.cmp(&b.1.conversation_id)));
    damaged.sort();
    Ok(Scan { rows: rows.into_iter().map(|(_, row)| row).collect(), damaged })
}

/// One pass over the echo agent's transcripts ([`scan`]).
#[derive(Debug, Default)]
pub struct Scan {
    /// The catalogue's rows, default chats first.
    pub rows: Vec<ScannedRow>,
    /// The conversations whose transcript could not be read, in order.
    pub damaged: Vec<String>,
}

/// `<scheme>@<id>` for a session URI `<scheme>:/<id>` (the store key the
/// host names a session's default conversation by).
fn store_key_of(session: &str) -> Option<String> {
    let (scheme, id) = session.split_once(":/")?;
    Some(format!("{scheme}@{id}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives() {
        assert_eq!(Directive::parse("hello"), Directive::Plain);
        assert_eq!(Directive::parse("/fail"), Directive::Fail);
        assert_eq!(Directive::parse("/slow 500 please"), Directive::Slow(500));
        assert_eq!(Directive::parse("/slow"), Directive::Slow(2_000));
        assert_eq!(Directive::parse("/busy 99999999999"), Directive::Busy(MAX_DIRECTIVE_MS));
        assert_eq!(Directive::parse("/approve"), Directive::Approve);
        assert_eq!(Directive::parse("/ask what colour?"), Directive::Ask);
        assert_eq!(Directive::parse("/failing"), Directive::Plain);
        assert_eq!(Directive::parse("/wake 2 hi"), Directive::Tool);
        assert_eq!(Directive::parse("/wakeful"), Directive::Plain);
    }

    #[test]
    fn tool_directives() {
        assert_eq!(
            tool_request("/wake 2 check the build"),
            Ok(HostToolRequest::ScheduleWakeup { after_seconds: Some(2), at: None, prompt: "check the build".into() })
        );
        assert!(tool_request("/wake soon hi").is_err());
        assert_eq!(tool_request("/send ahp-session:/b  hello there"), Ok(HostToolRequest::SendMessage { session: "ahp-session:/b".into(), text: "hello there".into() }));
        assert_eq!(tool_request("/peers"), Ok(HostToolRequest::ListPeers));
        assert_eq!(tool_request("/unwake wake-3"), Ok(HostToolRequest::CancelWakeup { id: "wake-3".into() }));
        assert!(tool_request("/send").is_err());
    }

    fn turn(text: &str) -> Turn {
        crate::exec::echo_transcript::test_support::turn("t1", text)
    }

    fn header(session: &str, chat: &str) -> Header {
        Header {
            session: session.to_owned(),
            chat: chat.to_owned(),
            title: String::new(),
            working_directory: Some("file:///w".to_owned()),
            created_at: "2026-01-01T00:00:00.000Z".to_owned(),
            modified_at: "2026-01-02T00:00:00.000Z".to_owned(),
        }
    }

    #[tokio::test]
    async fn a_forget_with_no_agent_rewrites_the_transcript_without_those_turns() {
        let dir = tempfile::tempdir().expect("tempdir");
        let h = header("ahp-session:/s1", "ahp-chat:/ahp-session@s1");
        let t = |id: &str| crate::exec::echo_transcript::test_support::turn(id, id);
        write_transcript(dir.path(), "ahp-session@s1", &h, &[t("a"), t("b"), t("c")]).await.expect("write");
        let chat = "ahp-chat:/ahp-session@s1".to_owned();
        let outcome = forget_in_file(dir.path(), &chat, "ahp-session@s1", &["b".to_owned(), "c".to_owned()]).await;
        assert_eq!(outcome, Outcome::Ok);
        let back = read_transcript(dir.path(), "ahp-session@s1").await.expect("read");
        assert_eq!(back.turns, vec![t("a")]);
        assert_eq!(back.session.as_deref(), Some("ahp-session:/s1"), "the header is kept");
        // Again, and for a conversation with no file: nothing to forget.
        assert_eq!(forget_in_file(dir.path(), &chat, "ahp-session@s1", &["b".to_owned()]).await, Outcome::Ok);
        assert_eq!(forget_in_file(dir.path(), &chat, "ahp-session@none", &["b".to_owned()]).await, Outcome::Ok);
    }

    #[tokio::test]
    async fn transcripts_round_trip_and_the_first_format_is_still_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let h = header("ahp-session:/s1", "ahp-chat:/ahp-session@s1");
        write_transcript(dir.path(), "ahp-session@s1", &h, &[turn("hi")]).await.expect("write");
        let back = read_transcript(dir.path(), "ahp-session@s1").await.expect("read");
        assert_eq!(back.session.as_deref(), Some("ahp-session:/s1"));
        assert_eq!(back.chat.as_deref(), Some("ahp-chat:/ahp-session@s1"));
        assert_eq!(back.created_at.as_deref(), Some("2026-01-01T00:00:00.000Z"));
        assert_eq!(back.turns, vec![turn("hi")]);

        let old = serde_json::to_vec(&vec![turn("old")]).expect("encode");
        std::fs::write(dir.path().join("ahp-session@s2.json"), old).expect("write old");
        let back = read_transcript(dir.path(), "ahp-session@s2").await.expect("read old");
        assert_eq!(back.session, None);
        assert_eq!(back.turns, vec![turn("old")]);
    }

    #[tokio::test]
    async fn a_scan_lists_conversations_with_turns_under_the_session_they_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path();
        // A second chat of s1, written before its default chat.
        write_transcript(p, "ahp-chat@c2", &header("ahp-session:/s1", "ahp-chat:/c2"), &[turn("second chat")]).await.expect("write");
        write_transcript(p, "ahp-session@s1", &header("ahp-session:/s1", "ahp-chat:/ahp-session@s1"), &[turn("first line\nmore")])
            .await
            .expect("write");
        // Started, never spoken in: not listed.
        write_transcript(p, "ahp-session@s3", &header("ahp-session:/s3", "ahp-chat:/ahp-session@s3"), &[]).await.expect("write");
        // The first format: the session is implied by the name.
        std::fs::write(p.join("ahp-session@s2.json"), serde_json::to_vec(&vec![turn("old one")]).expect("encode")).expect("write");
        // Skipped: garbage, a temp file, another extension.
        std::fs::write(p.join("ahp-session@bad.json"), b"{not json").expect("write");
        std::fs::write(p.join(".ahp-session@s1.json.tmp-1-1"), b"[]").expect("write");
        std::fs::write(p.join("notes.txt"), b"x").expect("write");

        let Scan { rows, damaged } = scan(p).expect("scan");
        assert_eq!(damaged, ["ahp-session@bad"], "the garbage is reported, not listed");
        let ids: Vec<&str> = rows.iter().map(|r| r.conversation_id.as_str()).collect();
        assert_eq!(ids, ["ahp-session@s1", "ahp-session@s2", "ahp-chat@c2"], "default chats first");
        let s1 = &rows[0];
        assert_eq!(s1.session.as_deref(), Some("ahp-session:/s1"));
        assert_eq!(s1.chat.as_deref(), Some("ahp-chat:/ahp-session@s1"));
        assert_eq!(s1.title, "first line", "the first message names it");
        assert_eq!(s1.working_directory.as_deref(), Some("file:///w"));
        assert_eq!(s1.created_at, WallTime::parse_iso("2026-01-01T00:00:00Z").unwrap_or_default());
        assert_eq!(s1.modified_at, WallTime::parse_iso("2026-01-02T00:00:00Z").unwrap_or_default());
        let s2 = &rows[1];
        assert_eq!(s2.session.as_deref(), Some("ahp-session:/s2"));
        assert_eq!(s2.chat.as_deref(), Some("ahp-chat:/ahp-session@s2"));
        assert!(s2.modified_at.0 > 0, "the mtime stands in");
    }

    #[test]
    fn chunking() {
        assert_eq!(chunks("Echo: hello", 4).concat(), "Echo: hello");
        assert_eq!(chunks("Echo: hello", 4).len(), 4);
        assert_eq!(chunks("ab", 4), vec!["a", "b"]);
        assert_eq!(chunks("é漢字", 2), vec!["é漢", "字"], "cut on character boundaries");
        assert!(chunks("", 4).is_empty());
        let big = "ü".repeat(450_000);
        let pieces = chunks(&big, 30);
        assert!(pieces.len() <= 30 && pieces.iter().all(|p| !p.is_empty()), "{} pieces", pieces.len());
        assert_eq!(pieces.concat(), big);
    }
}
