//! Sessions of several chats: `createChat` and `disposeChat` (Sessions
//! page, "Commands": "A second conversation in the session"; "End one chat;
//! the session's default chat is kept").

use ahp_types::actions::{ChatTurnStartedAction, StateAction};
use ahp_types::commands::{CreateChatParams, DisposeChatParams};
use ahp_types::state::Message;
use ahp_types::Uri;
use serde_json::Value;

use crate::protocol::params as parse;
use super::Host;
use crate::continuation::{CreateChatReq, DisposeChatReq, QueuedCommand, WaitingRequest};
use crate::effect::{ConnId, LogLevel};
use crate::grants::Operation;
use crate::ids::ResourceId;
use crate::protocol::error::*;
use crate::record::ChatRecord;
use crate::session::{ParkedWork, Phase, Queued, QueuedAction, Waiter};

/// -32010: the chat URI is taken.
const ALREADY_EXISTS: i32 = -32010;

impl Host {
    /// Whether the session has a parked write or queued work: a new command
    /// waits behind it, in order ([`Host::queue_command`]).
    fn busy_with_writes(&self, session_uri: &Uri) -> bool {
        self.sessions.get(session_uri).is_some_and(|s| s.parked.is_some() || !s.inbox.is_empty())
    }

    /// Queues request `id` of `conn`, decoded, behind the session's parked
    /// write and the work already queued.
    fn queue_command(&mut self, session_uri: &Uri, conn: ConnId, id: u64, command: QueuedCommand) {
        if let Some(session) = self.sessions.get_mut(session_uri) {
            session.inbox.push_back(Queued::Command { conn, id, command });
        }
    }

    /// Runs a command that waited behind a parked write on from its decoded
    /// form (`host/dispatch.rs`, `drain_inbox`).
    pub(crate) fn run_queued_command(&mut self, conn: ConnId, id: u64, command: QueuedCommand) {
        crate::mark!("queued_command_runs");
        match command {
            QueuedCommand::CreateChat(request) => self.create_chat(conn, id, *request),
            QueuedCommand::DisposeChat(request) => self.dispose_chat(conn, id, request),
        }
    }

    /// `createChat`: checks, then writes the record with the new chat, and
    /// once that is durable adds it (`session/chatAdded` before the reply)
    /// and starts its agent. A chat made in a sleeping session wakes it.
    ///
    /// The checks run in one order, whether they read the request or the
    /// host; those that read only the request are made here once, and the
    /// decoded request ([`CreateChatReq`]) runs on in [`Host::create_chat`].
    pub(crate) fn on_create_chat(&mut self, conn: ConnId, id: u64, params: Value) {
        if let Err(e) = self.shared.authorize(conn, Operation::ChatCreate) {
            return self.shared.reply_error(conn, id, e);
        }
        let params: CreateChatParams = match parse(params) {
            Ok(p) => p,
            Err(e) => return self.shared.reply_error(conn, id, e),
        };
        if let Some(e) = self.create_chat_refusal(&params.channel) {
            return self.shared.reply_error(conn, id, e);
        }
        if params.source.is_some() {
            return self.shared.reply_error(conn, id, error(INVALID_PARAMS, "forks and side chats are not offered by this agent"));
        }
        let chat_id = match ResourceId::parse(&params.chat) {
            Ok(r) => r,
            Err(e) => return self.shared.reply_error(conn, id, error(INVALID_PARAMS, format!("invalid chat URI: {e}"))),
        };
        if let Some(e) = self.new_chat_refusal(&params.channel, &chat_id.uri(), params.working_directories.as_deref()) {
            return self.shared.reply_error(conn, id, e);
        }
        if let Some(m) = &params.initial_message {
            if m.origin.kind != ahp_types::state::MessageKind::User {
                return self.shared.reply_error(conn, id, error(INVALID_PARAMS, "a first message must be a user message"));
            }
        }
        let request = CreateChatReq {
            session: params.channel,
            chat: chat_id,
            working_directories: params.working_directories,
            initial_message: params.initial_message,
        };
        self.create_chat_checked(conn, id, request);
    }

    /// [`Host::on_create_chat`] run on from its decoded request, after a
    /// wake or a parked write: the checks that read the host run again, in
    /// their order, since it may have moved meanwhile.
    pub(crate) fn create_chat(&mut self, conn: ConnId, id: u64, request: CreateChatReq) {
        if let Err(e) = self.shared.authorize(conn, Operation::ChatCreate) {
            return self.shared.reply_error(conn, id, e);
        }
        if let Some(e) = self.create_chat_refusal(&request.session) {
            return self.shared.reply_error(conn, id, e);
        }
        if let Some(e) = self.new_chat_refusal(&request.session, &request.chat.uri(), request.working_directories.as_deref()) {
            return self.shared.reply_error(conn, id, e);
        }
        self.create_chat_checked(conn, id, request);
    }

    /// Why `session_uri` may not take a new chat now: it is unknown, being
    /// disposed or still being made, or its agent holds one chat only.
    fn create_chat_refusal(&self, session_uri: &Uri) -> Option<ahp_types::messages::JsonRpcError> {
        let Some(session) = self.sessions.get(session_uri) else {
            return Some(error(SESSION_NOT_FOUND, format!("no session {}", crate::ids::printable(session_uri))));
        };
        match session.phase {
            Phase::Disposing { .. } => return Some(error(SESSION_NOT_FOUND, "the session is being disposed")),
            Phase::Starting { .. } => return Some(error(INVALID_PARAMS, "the session is still being created")),
            _ => {}
        }
        let multiple = self.shared.config.agents.iter().any(|a| a.provider == session.record.provider && a.multiple_chats);
        if !multiple {
            return Some(error(INVALID_PARAMS, "this session's agent holds one chat only"));
        }
        None
    }

    /// Why chat `chat_uri` in `dirs` may not be made in `session_uri` now:
    /// the URI is taken, or a folder is not one of the session's.
    fn new_chat_refusal(&self, session_uri: &Uri, chat_uri: &Uri, dirs: Option<&[Uri]>) -> Option<ahp_types::messages::JsonRpcError> {
        if self.shared.chats.contains_key(chat_uri) || self.sessions.contains_key(chat_uri) {
            return Some(error(ALREADY_EXISTS, format!("chat {chat_uri} already exists")));
        }
        let session = self.sessions.get(session_uri)?;
        if let Some(dirs) = dirs {
            if let Some(bad) = dirs.iter().find(|d| !session.record.working_directories.contains(d)) {
                return Some(error(INVALID_PARAMS, format!("{} is not one of the session's folders", crate::ids::printable(bad))));
            }
        }
        None
    }

    /// A `createChat` that passed its checks: queued behind a parked write,
    /// held for a wake, or written.
    fn create_chat_checked(&mut self, conn: ConnId, id: u64, request: CreateChatReq) {
        let session_uri = request.session.clone();
        if self.busy_with_writes(&session_uri) {
            return self.queue_command(&session_uri, conn, id, QueuedCommand::CreateChat(Box::new(request)));
        }
        if self.sessions.get(&session_uri).is_some_and(|s| s.resident.is_none()) {
            if let Some(s) = self.sessions.get_mut(&session_uri) {
                crate::mark!("create_chat_wakes_session");
                s.waiters.push(Waiter::Request { conn, id, request: WaitingRequest::CreateChat(Box::new(request)) });
            }
            return self.wake(&session_uri);
        }
        let chat_uri = request.chat.uri();
        let record = ChatRecord {
            resource: chat_uri.clone(),
            title: String::new(),
            conversation_id: request.chat.store_key(),
            modified_at: self.shared.now.wall.to_iso(),
            status: crate::session::state::IDLE,
            fresh: true,
            senders: Default::default(),
        changes: None,
        written: Default::default(),
        kept: Vec::new(),
        draft: None,
        };
        let work = ParkedWork::CreateChat { conn, id, chat: Box::new(record), initial_message: request.initial_message.map(Box::new) };
        self.in_session(&session_uri, |s, sh| s.park(sh, work, None));
    }

    pub(crate) fn finish_create_chat(
        &mut self,
        session_uri: &Uri,
        conn: ConnId,
        id: u64,
        record: ChatRecord,
        initial_message: Option<Message>,
        failure: Option<String>,
    ) {
        if let Some(message) = failure {
            return self.shared.reply_error(conn, id, error(INTERNAL_ERROR, format!("not saved: the session store failed: {message}")));
        }
        let chat_uri = record.resource.clone();
        let Some(wake) = self.in_session(session_uri, |s, sh| s.add_chat(sh, record)) else { return };
        if wake {
            self.wake(session_uri);
        }
        self.summary_changed(session_uri);
        self.shared.reply(conn, id, Value::Null);
        crate::mark!("chat_created");
        self.shared.log(LogLevel::Info, "chat.created", Some(session_uri.clone()), chat_uri.clone());
        if let Some(message) = initial_message {
            let turn_id = self.shared.rng.hex_id();
            let action = StateAction::ChatTurnStarted(ChatTurnStartedAction {
                turn_id,
                started_at: self.shared.now.wall.to_iso(),
                message,
                queued_message_id: None,
                meta: None,
            });
            self.process_action(session_uri, QueuedAction { conn, channel: chat_uri, client_seq: 0, action });
        }
    }

    /// `disposeChat`: the default chat is kept (-32602); any other chat is
    /// written out of the record, and once that is durable its agent is
    /// deleted, `session/chatRemoved` said, and the request answered.
    pub(crate) fn on_dispose_chat(&mut self, conn: ConnId, id: u64, params: Value) {
        if let Err(e) = self.shared.authorize(conn, Operation::ChatDispose) {
            return self.shared.reply_error(conn, id, e);
        }
        let params: DisposeChatParams = match parse(params) {
            Ok(p) => p,
            Err(e) => return self.shared.reply_error(conn, id, e),
        };
        self.dispose_chat_authorized(conn, id, DisposeChatReq { chat: params.channel });
    }

    /// [`Host::on_dispose_chat`] run on from its decoded request, after a
    /// parked write: the grant and the state are read anew.
    pub(crate) fn dispose_chat(&mut self, conn: ConnId, id: u64, request: DisposeChatReq) {
        if let Err(e) = self.shared.authorize(conn, Operation::ChatDispose) {
            return self.shared.reply_error(conn, id, e);
        }
        self.dispose_chat_authorized(conn, id, request);
    }

    /// A decoded `disposeChat` its connection may send: checked against the
    /// host, then queued behind a parked write or written.
    fn dispose_chat_authorized(&mut self, conn: ConnId, id: u64, request: DisposeChatReq) {
        let Some(session_uri) = self.shared.chats.get(&request.chat).cloned() else {
            return self.shared.reply_error(conn, id, error(SESSION_NOT_FOUND, format!("no chat {}", crate::ids::printable(&request.chat))));
        };
        let Some(session) = self.sessions.get(&session_uri) else { return };
        if session.record.default_chat == request.chat {
            return self.shared.reply_error(conn, id, error(INVALID_PARAMS, "the session's default chat is kept: dispose the session instead"));
        }
        if matches!(session.phase, Phase::Disposing { .. }) {
            return self.shared.reply_error(conn, id, error(SESSION_NOT_FOUND, "the session is being disposed"));
        }
        if self.busy_with_writes(&session_uri) {
            return self.queue_command(&session_uri, conn, id, QueuedCommand::DisposeChat(request));
        }
        let work = ParkedWork::DisposeChat { conn, id, chat: request.chat };
        self.in_session(&session_uri, |s, sh| s.park(sh, work, None));
    }

    pub(crate) fn finish_dispose_chat(&mut self, session_uri: &Uri, conn: ConnId, id: u64, chat: Uri, failure: Option<String>) {
        if let Some(message) = failure {
            return self.shared.reply_error(conn, id, error(INTERNAL_ERROR, format!("not saved: the session store failed: {message}")));
        }
        let Some(wake_done) = self.in_session(session_uri, |s, sh| s.remove_chat(sh, &chat)) else { return };
        let Some(wake_done) = wake_done else {
            return self.shared.reply(conn, id, Value::Null);
        };
        self.recount_active();
        self.summary_changed(session_uri);
        self.shared.reply(conn, id, Value::Null);
        crate::mark!("chat_disposed");
        self.shared.log(LogLevel::Info, "chat.disposed", Some(session_uri.clone()), chat);
        if wake_done {
            self.finish_wake(session_uri);
        }
    }
}
