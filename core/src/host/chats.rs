//! Sessions of several chats: `createChat` and `disposeChat` (Sessions
//! page, "Commands": "A second conversation in the session"; "End one chat;
//! the session's default chat is kept").

use ahp_types::actions::{ChatTurnStartedAction, SessionChatAddedAction, SessionChatRemovedAction, StateAction};
use ahp_types::commands::{CreateChatParams, DisposeChatParams};
use ahp_types::state::Message;
use ahp_types::Uri;
use serde_json::Value;

use super::connection::parse;
use super::{Host, Op};
use crate::effect::{BackendCmd, ConnId, LogLevel};
use crate::grants::Operation;
use crate::ids::ResourceId;
use crate::protocol::error::*;
use crate::record::ChatRecord;
use crate::session::state::{chat_state, chat_summary};
use crate::session::{Parked, ParkedWork, Phase, Queued, QueuedAction, Waiter};

/// -32010: the chat URI is taken.
const ALREADY_EXISTS: i32 = -32010;

impl Host {
    /// Whether the session has a parked write or queued work: a new command
    /// waits behind it, in order.
    fn queue_if_busy(&mut self, session_uri: &Uri, conn: ConnId, id: u64, method: &str, params: &Value) -> bool {
        let Some(session) = self.sessions.get_mut(session_uri) else { return false };
        if session.parked.is_some() || !session.inbox.is_empty() {
            session.inbox.push_back(Queued::Command { conn, id, method: method.to_owned(), params: params.clone() });
            return true;
        }
        false
    }

    /// `createChat`: checks, then writes the record with the new chat, and
    /// once that is durable adds it (`session/chatAdded` before the reply)
    /// and starts its agent. A chat made in a sleeping session wakes it.
    pub(crate) fn on_create_chat(&mut self, conn: ConnId, id: u64, params: Value) {
        if let Err(e) = self.authorize(conn, Operation::ChatCreate) {
            return self.reply_error(conn, id, e);
        }
        let raw = params.clone();
        let params: CreateChatParams = match parse(params) {
            Ok(p) => p,
            Err(e) => return self.reply_error(conn, id, e),
        };
        let session_uri = params.channel.clone();
        let Some(session) = self.sessions.get(&session_uri) else {
            return self.reply_error(conn, id, error(SESSION_NOT_FOUND, format!("no session {}", crate::ids::printable(&session_uri))));
        };
        match session.phase {
            Phase::Disposing { .. } => return self.reply_error(conn, id, error(SESSION_NOT_FOUND, "the session is being disposed")),
            Phase::Starting { .. } => return self.reply_error(conn, id, error(INVALID_PARAMS, "the session is still being created")),
            _ => {}
        }
        let multiple = self.config.agents.iter().any(|a| a.provider == session.record.provider && a.multiple_chats);
        if !multiple {
            return self.reply_error(conn, id, error(INVALID_PARAMS, "this session's agent holds one chat only"));
        }
        if params.source.is_some() {
            return self.reply_error(conn, id, error(INVALID_PARAMS, "forks and side chats are not offered by this agent"));
        }
        let chat_id = match ResourceId::parse(&params.chat) {
            Ok(r) => r,
            Err(e) => return self.reply_error(conn, id, error(INVALID_PARAMS, format!("invalid chat URI: {e}"))),
        };
        let chat_uri = chat_id.uri();
        if self.chats.contains_key(&chat_uri) || self.sessions.contains_key(&chat_uri) {
            return self.reply_error(conn, id, error(ALREADY_EXISTS, format!("chat {chat_uri} already exists")));
        }
        if let Some(dirs) = &params.working_directories {
            if let Some(bad) = dirs.iter().find(|d| !session.record.working_directories.contains(d)) {
                return self.reply_error(conn, id, error(INVALID_PARAMS, format!("{} is not one of the session's folders", crate::ids::printable(bad))));
            }
        }
        if let Some(m) = &params.initial_message {
            if m.origin.kind != ahp_types::state::MessageKind::User {
                return self.reply_error(conn, id, error(INVALID_PARAMS, "a first message must be a user message"));
            }
        }
        if self.queue_if_busy(&session_uri, conn, id, "createChat", &raw) {
            return;
        }
        if self.sessions.get(&session_uri).is_some_and(|s| s.resident.is_none()) {
            if let Some(s) = self.sessions.get_mut(&session_uri) {
                crate::mark!("create_chat_wakes_session");
                s.waiters.push(Waiter::Request { conn, id, method: "createChat".to_owned(), params: raw });
            }
            return self.wake(&session_uri);
        }
        let record = ChatRecord {
            resource: chat_uri.clone(),
            title: String::new(),
            conversation_id: chat_id.store_key(),
            modified_at: self.now.wall.to_iso(),
            status: crate::session::state::IDLE,
            fresh: true,
            senders: Default::default(),
        changes: None,
        written: Default::default(),
        kept: Vec::new(),
        draft: None,
        };
        let Some(session) = self.sessions.get_mut(&session_uri) else { return };
        let saved = session.record.clone();
        session.record.chats.push(record.clone());
        let op = self.store_put(&session_uri);
        if let (Some(session), Some(op)) = (self.sessions.get_mut(&session_uri), op) {
            session.record = saved;
            session.parked = Some(Box::new(Parked {
                op,
                work: ParkedWork::CreateChat { conn, id, chat: Box::new(record), initial_message: params.initial_message.map(Box::new) },
            }));
        }
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
            return self.reply_error(conn, id, error(INTERNAL_ERROR, format!("not saved: the session store failed: {message}")));
        }
        let chat_uri = record.resource.clone();
        let state = chat_state(&record, Vec::new());
        let summary = chat_summary(&state);
        let Some(session) = self.sessions.get_mut(session_uri) else { return };
        session.record.chats.push(record.clone());
        if let Some(resident) = session.resident.as_mut() {
            resident.chats.insert(chat_uri.clone(), state);
        }
        let phase = session.phase.clone();
        let provider = session.record.provider.clone();
        self.chats.insert(chat_uri.clone(), session_uri.clone());
        self.emit(session_uri, StateAction::SessionChatAdded(SessionChatAddedAction { summary }), None);
        self.touch(session_uri);
        self.mark_activity(session_uri);
        match phase {
            // A live session starts the chat's agent now; a waking one adds
            // it to the wake, so the wake ends once it too has answered.
            Phase::Live | Phase::Waking(_) => {
                let op = self.backend(
                    Op::Start { session: session_uri.clone(), chat: chat_uri.clone() },
                    provider,
                    chat_uri.clone(),
                    BackendCmd::Start {
                        session: session_uri.clone(),
                        conversation_id: record.conversation_id.clone(),
                        working_directory: self.sessions.get(session_uri).and_then(|s| s.record.working_directories.first().cloned()),
                        peer_directories: self.sessions.get(session_uri).map(|s| self.peers_for(s)).unwrap_or_default(),
                        resume: false,
                    },
                );
                if let Some(s) = self.sessions.get_mut(session_uri) {
                    s.phase_ops.insert(op);
                }
            }
            Phase::Asleep => self.wake(session_uri),
            _ => {}
        }
        self.summary_changed(session_uri);
        self.reply(conn, id, Value::Null);
        crate::mark!("chat_created");
        self.log(LogLevel::Info, "chat.created", Some(session_uri.clone()), chat_uri.clone());
        if let Some(message) = initial_message {
            let turn_id = self.rng.hex_id();
            let action = StateAction::ChatTurnStarted(ChatTurnStartedAction {
                turn_id,
                started_at: self.now.wall.to_iso(),
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
        if let Err(e) = self.authorize(conn, Operation::ChatDispose) {
            return self.reply_error(conn, id, e);
        }
        let raw = params.clone();
        let params: DisposeChatParams = match parse(params) {
            Ok(p) => p,
            Err(e) => return self.reply_error(conn, id, e),
        };
        let Some(session_uri) = self.chats.get(&params.channel).cloned() else {
            return self.reply_error(conn, id, error(SESSION_NOT_FOUND, format!("no chat {}", crate::ids::printable(&params.channel))));
        };
        let Some(session) = self.sessions.get(&session_uri) else { return };
        if session.record.default_chat == params.channel {
            return self.reply_error(conn, id, error(INVALID_PARAMS, "the session's default chat is kept: dispose the session instead"));
        }
        if matches!(session.phase, Phase::Disposing { .. }) {
            return self.reply_error(conn, id, error(SESSION_NOT_FOUND, "the session is being disposed"));
        }
        if self.queue_if_busy(&session_uri, conn, id, "disposeChat", &raw) {
            return;
        }
        let Some(session) = self.sessions.get_mut(&session_uri) else { return };
        let saved = session.record.clone();
        session.record.chats.retain(|c| c.resource != params.channel);
        let op = self.store_put(&session_uri);
        if let (Some(session), Some(op)) = (self.sessions.get_mut(&session_uri), op) {
            session.record = saved;
            session.parked = Some(Box::new(Parked { op, work: ParkedWork::DisposeChat { conn, id, chat: params.channel } }));
        }
    }

    pub(crate) fn finish_dispose_chat(&mut self, session_uri: &Uri, conn: ConnId, id: u64, chat: Uri, failure: Option<String>) {
        if let Some(message) = failure {
            return self.reply_error(conn, id, error(INTERNAL_ERROR, format!("not saved: the session store failed: {message}")));
        }
        let Some(session) = self.sessions.get_mut(session_uri) else { return };
        let Some(pos) = session.record.chats.iter().position(|c| c.resource == chat) else {
            return self.reply(conn, id, Value::Null);
        };
        let record = session.record.chats.remove(pos);
        session.pending_sends.retain(|(c, _, _)| *c != chat);
        session.sends_in_flight.retain(|_, (c, _)| *c != chat);
        // A late start answer must not name a conversation for a chat made
        // anew under this URI, and a wake no longer waits for it (issue 19,
        // seed 55746: the disposed chat's start answered the wake and gave
        // the new chat its deleted conversation).
        session.starts_unanswered.retain(|_, c| *c != chat);
        let ops = &self.ops;
        session.phase_ops.retain(|op| !Host::starts_chat(ops, op, &chat));
        if let Phase::Waking(wake) = &mut session.phase {
            wake.history.remove(&chat);
        }
        let wake_done = session.phase.is_waking() && session.phase_ops.is_empty();
        let provider = session.record.provider.clone();
        self.backend(Op::Fire, provider, chat.clone(), BackendCmd::Delete { conversation_id: record.conversation_id });
        self.emit(session_uri, StateAction::SessionChatRemoved(SessionChatRemovedAction { chat: chat.clone() }), None);
        if let Some(resident) = self.sessions.get_mut(session_uri).and_then(|s| s.resident.as_mut()) {
            resident.chats.remove(&chat);
            resident.turn_started_mono.remove(&chat);
        }
        self.chats.remove(&chat);
        self.retired.insert(chat.clone());
        for c in self.conns.values_mut() {
            c.subscriptions.remove(&chat);
        }
        self.recount_active();
        self.summary_changed(session_uri);
        self.reply(conn, id, Value::Null);
        crate::mark!("chat_disposed");
        self.log(LogLevel::Info, "chat.disposed", Some(session_uri.clone()), chat);
        if wake_done {
            self.finish_wake(session_uri);
        }
    }
}
