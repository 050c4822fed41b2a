//! `moveChat` (issue 23 "Move"; ahp-types `MoveChatParams`,
//! `ChatMoveToSessionDestination`, `MoveChatResult`; docs/DECISIONS.md, 17):
//! the checks that read both sessions, then the writes in their order, then
//! what each session says. Each session's own part is `session/moves.rs`'s.
//!
//! - Within one session: the record with the new order is written ahead,
//!   then `session/chatsReordered` with the complete order, then the reply.
//! - To another session: the destination's record with the chat (under its
//!   next move generation, `record::Moved`) is written first, the source
//!   held meanwhile; then the source's record without it, the destination
//!   held; once both are durable the chat leaves the source
//!   (`session/chatRemoved`, its agent let go keeping the conversation) and
//!   arrives in the destination (`session/chatAdded`, and
//!   `session/chatsReordered` when it is not last; its agent resumed there
//!   when the destination is live), both rows are told, and the request is
//!   answered with the destination. A crash between the two writes leaves
//!   the chat in both records: the higher generation keeps it at restore
//!   (`Host::restore`).
//! - To a new session: not offered (-32602).

use ahp_types::commands::{ChatMoveDestination, MoveChatParams, MoveChatResult};
use ahp_types::Uri;
use serde_json::Value;

use super::Host;
use crate::continuation::{MoveChatReq, QueuedCommand, WaitingRequest};
use crate::effect::{ConnId, LogLevel};
use crate::grants::Operation;
use crate::protocol::error::*;
use crate::protocol::params as parse;
use crate::record::Moved;
use crate::session::{MoveWork, Parked, ParkedWork, Phase, Queued, Waiter};

impl Host {
    /// `moveChat`: the grants (`chat:dispose` to take the chat from where it
    /// is and `chat:create` to put it where it goes, both for a move within
    /// one session too; -32009 without either), the params, then
    /// [`Host::move_chat`]. A `newSession` destination is refused (-32602,
    /// "not offered"), as is one of a kind this host does not know.
    pub(crate) fn on_move_chat(&mut self, conn: ConnId, id: u64, params: Value) {
        if let Err(e) = self.move_grants(conn) {
            return self.shared.reply_error(conn, id, e);
        }
        let params: MoveChatParams = match parse(params) {
            Ok(p) => p,
            Err(e) => return self.shared.reply_error(conn, id, e),
        };
        let destination = match params.destination {
            ChatMoveDestination::Session(d) => d,
            ChatMoveDestination::NewSession(_) => {
                crate::mark!("move_refused_new_session");
                return self.shared.reply_error(conn, id, error(INVALID_PARAMS, "moveChat to a new session is not offered by this host: move the chat to an existing session"));
            }
            ChatMoveDestination::Unknown(_) => {
                return self.shared.reply_error(conn, id, error(INVALID_PARAMS, "unknown moveChat destination kind: this host takes kind \"session\""));
            }
        };
        self.move_chat_granted(conn, id, MoveChatReq { chat: params.channel, destination: destination.session, after: destination.after });
    }

    /// [`Host::on_move_chat`] run on from its decoded request, after a wake
    /// or behind a parked write: the grants and every check that reads the
    /// host are made again, since it may have moved meanwhile.
    pub(crate) fn move_chat(&mut self, conn: ConnId, id: u64, request: MoveChatReq) {
        if let Err(e) = self.move_grants(conn) {
            return self.shared.reply_error(conn, id, e);
        }
        self.move_chat_granted(conn, id, request);
    }

    /// Both grants a move needs (module docs).
    fn move_grants(&self, conn: ConnId) -> Result<(), ahp_types::messages::JsonRpcError> {
        self.shared.authorize(conn, Operation::ChatDispose)?;
        self.shared.authorize(conn, Operation::ChatCreate)
    }

    /// Why request `request` may not move its chat now, before any session
    /// is written: the chat, the destination or the anchor do not resolve,
    /// the chat is a default chat, a session is being made or disposed.
    /// Returns the source session's URI when it may.
    fn move_refusal(&self, request: &MoveChatReq) -> Result<Uri, ahp_types::messages::JsonRpcError> {
        let chat = &request.chat;
        let Some(source_uri) = self.shared.chats.get(chat).map(|u| u.to_string()) else {
            return Err(error(SESSION_NOT_FOUND, format!("no chat {}", crate::ids::printable(chat))));
        };
        let Some(source) = self.sessions.get(&source_uri) else {
            return Err(error(SESSION_NOT_FOUND, format!("no chat {}", crate::ids::printable(chat))));
        };
        if source.record.is_default_chat(chat) {
            crate::mark!("move_refused_default_chat");
            return Err(error(INVALID_PARAMS, "the session's default chat is not movable (movable: false)"));
        }
        let Some(destination) = self.sessions.get(&request.destination) else {
            return Err(error(SESSION_NOT_FOUND, format!("no session {}", crate::ids::printable(&request.destination))));
        };
        if let Some(after) = &request.after {
            if after == chat {
                crate::mark!("move_refused_anchor");
                return Err(error(INVALID_PARAMS, "a chat cannot be placed after itself: name another chat of the destination as after"));
            }
            if !destination.record.chats.iter().any(|c| c.resource == *after) {
                crate::mark!("move_refused_anchor");
                return Err(error(INVALID_PARAMS, format!("{} is not a chat of the destination session", crate::ids::printable(after))));
            }
        }
        for session in [source, destination] {
            match session.phase {
                Phase::Disposing { .. } => return Err(error(SESSION_NOT_FOUND, format!("session {} is being disposed", crate::ids::printable(&session.record.resource)))),
                Phase::Starting { .. } => return Err(error(INVALID_PARAMS, format!("session {} is still being created", crate::ids::printable(&session.record.resource)))),
                _ => {}
            }
        }
        Ok(source_uri)
    }

    /// A `moveChat` its connection may send: checked, then queued behind a
    /// parked write, held for the source's wake, or written.
    fn move_chat_granted(&mut self, conn: ConnId, id: u64, request: MoveChatReq) {
        let source_uri = match self.move_refusal(&request) {
            Ok(uri) => uri,
            Err(e) => return self.shared.reply_error(conn, id, e),
        };
        if source_uri == request.destination {
            return self.reorder_chat(conn, id, request);
        }
        let (Some(source), Some(destination)) = (self.sessions.get(&source_uri), self.sessions.get(&request.destination)) else { return };
        if source.record.provider != destination.record.provider {
            crate::mark!("move_refused_other_agent");
            return self.shared.reply_error(conn, id, error(INVALID_PARAMS, "a chat moves only between sessions of the same agent"));
        }
        if !self.shared.agent_moves_chats(&source.record.provider) {
            crate::mark!("move_refused_agent");
            return self.shared.reply_error(conn, id, error(INVALID_PARAMS, "this session's agent cannot move a conversation to another session"));
        }
        if destination.start_owed {
            // Its next wake starts every chat afresh (its creation failed):
            // the moved conversation would be lost there.
            crate::mark!("move_refused_destination_start_owed");
            return self.shared.reply_error(conn, id, error(INVALID_PARAMS, "the destination session failed to start: send it a message first"));
        }
        if destination.phase.is_waking() {
            crate::mark!("move_refused_destination_waking");
            return self.shared.reply_error(conn, id, error(INVALID_PARAMS, "the destination session is waking: try again"));
        }
        let busy = [source_uri.clone(), request.destination.clone()]
            .into_iter()
            .find(|uri| self.sessions.get(uri).is_some_and(|s| s.work.parked.is_some() || !s.work.inbox.is_empty()));
        if let Some(uri) = busy {
            {
                if let Some(s) = self.sessions.get_mut(&uri) {
                    s.work.inbox.push_back(Queued::Command { conn, id, command: QueuedCommand::MoveChat(request) });
                }
                return;
            }
        }
        // The chat's held state goes with it: a source whose state is not
        // held wakes first (as `createChat` wakes its session).
        if self.sessions.get(&source_uri).is_some_and(|s| s.resident.is_none()) {
            if let Some(s) = self.sessions.get_mut(&source_uri) {
                crate::mark!("move_wakes_source");
                s.work.waiters.push(Waiter::Request { conn, id, request: WaitingRequest::MoveChat(request) });
            }
            return self.wake(&source_uri);
        }
        let Some(source) = self.sessions.get(&source_uri) else { return };
        if let Some(reason) = source.move_out_refusal(&request.chat) {
            return self.shared.reply_error(conn, id, error(INVALID_PARAMS, reason));
        }
        let Some(mut chat) = source.record.chats.iter().find(|c| c.resource == request.chat).cloned() else { return };
        // The chat carries the settings it ran on as its own from its first
        // move on (Sessions page: "a chat moved to another session [starts]
        // with what it ran on").
        let config = chat.moved.as_ref().map_or_else(|| source.record.config.clone(), |m| m.config.clone());
        chat.moved = Some(Box::new(Moved { moves: chat.moves() + 1, config }));
        let work = MoveWork { conn, id, chat, after: request.after, source: source_uri.clone(), destination: request.destination.clone() };
        // First write: the destination with the chat; the source held.
        let destination_uri = request.destination;
        self.in_session(&destination_uri, |s, sh| s.park(sh, ParkedWork::MoveIn(Box::new(work)), None));
        let op = self.sessions.get(&destination_uri).and_then(|s| s.work.parked.as_ref()).map(|p| p.op);
        let Some(op) = op else { return };
        if let Some(s) = self.sessions.get_mut(&source_uri) {
            s.work.parked = Some(Box::new(Parked { op, work: ParkedWork::MoveHold, kept: None }));
        }
        crate::mark!("move_first_write");
    }

    /// A move within one session: the new order written ahead.
    fn reorder_chat(&mut self, conn: ConnId, id: u64, request: MoveChatReq) {
        let session_uri = request.destination.clone();
        if self.sessions.get(&session_uri).is_some_and(|s| s.work.parked.is_some() || !s.work.inbox.is_empty()) {
            if let Some(s) = self.sessions.get_mut(&session_uri) {
                s.work.inbox.push_back(Queued::Command { conn, id, command: QueuedCommand::MoveChat(request) });
            }
            return;
        }
        let work = ParkedWork::Reorder { conn, id, chat: request.chat, after: request.after };
        self.in_session(&session_uri, |s, sh| s.park(sh, work, None));
    }

    /// A reorder's write finished: the order applied and said, then the
    /// answer (or the store's refusal, nothing changed).
    pub(crate) fn finish_reorder(&mut self, session_uri: &Uri, conn: ConnId, id: u64, chat: Uri, after: Option<Uri>, failure: Option<String>) {
        if let Some(message) = failure {
            return self.shared.reply_error(conn, id, error(INTERNAL_ERROR, format!("not saved: the session store failed: {message}")));
        }
        self.in_session(session_uri, |s, sh| s.apply_reorder(sh, &chat, after.as_ref()));
        self.summary_changed(session_uri);
        self.reply_moved(conn, id, session_uri);
        self.shared.log(LogLevel::Info, "chat.reordered", Some(session_uri.clone()), chat);
    }

    /// The first write of a move (the destination's record with the chat)
    /// finished: on success the source's record without it is written, the
    /// destination held meanwhile; on failure the source is let go and the
    /// request refused, nothing changed.
    pub(crate) fn move_in_written(&mut self, work: Box<MoveWork>, failure: Option<String>) {
        if let Some(message) = failure {
            crate::mark!("move_not_saved");
            self.release_move_hold(&work.source);
            return self.shared.reply_error(work.conn, work.id, error(INTERNAL_ERROR, format!("not saved: the session store failed: {message}")));
        }
        let (source, destination) = (work.source.clone(), work.destination.clone());
        if !self.sessions.contains_key(&source) {
            // Not reachable (a session a move holds is not disposed); the
            // chat is the destination's then.
            return self.finish_move(work, None);
        }
        if let Some(s) = self.sessions.get_mut(&source) {
            s.work.parked = None;
        }
        let kept = work.clone();
        let op = self.in_session(&source, |s, sh| {
            s.park(sh, ParkedWork::MoveOut(work), None);
            s.work.parked.as_ref().map(|p| p.op)
        });
        match (op.flatten(), self.sessions.get_mut(&destination)) {
            (Some(op), Some(s)) => s.work.parked = Some(Box::new(Parked { op, work: ParkedWork::MoveHold, kept: None })),
            // The store was not asked (not reachable: a session a move
            // holds is not disposed): the move ends on the first write.
            (None, _) => self.finish_move(kept, None),
            (Some(_), None) => {}
        }
        crate::mark!("move_second_write");
    }

    /// The second write of a move (the source's record without the chat)
    /// finished: the chat leaves the source and arrives in the destination,
    /// both rows are told, and the request is answered with the
    /// destination. A failed write does not undo the move: the
    /// destination's record holds the chat under the higher generation,
    /// which wins at restore, and the source's record is written again.
    pub(crate) fn finish_move(&mut self, work: Box<MoveWork>, failure: Option<String>) {
        let MoveWork { conn, id, chat, after, source, destination } = *work;
        if let Some(message) = failure {
            crate::mark!("move_source_write_failed");
            self.shared.log(LogLevel::Warn, "move.source_not_saved", Some(source.clone()), format!(
                "the record without {} is written again: {message}", crate::ids::printable(&chat.resource)
            ));
            if let Some(s) = self.sessions.get_mut(&source) {
                s.work.put_owed = true;
            }
        }
        let chat_uri = chat.resource.clone();
        let taken = self.in_session(&source, |s, sh| s.take_moved_chat(sh, &chat_uri)).flatten();
        let (record, state) = match taken {
            Some((mut record, state)) => {
                record.moved = chat.moved;
                (record, state)
            }
            None => (chat, None),
        };
        let held = self.sessions.get_mut(&destination).is_some_and(|s| matches!(s.work.parked.as_deref(), Some(Parked { work: ParkedWork::MoveHold, .. })));
        if held {
            if let Some(s) = self.sessions.get_mut(&destination) {
                s.work.parked = None;
            }
        }
        self.in_session(&destination, |s, sh| s.put_moved_chat(sh, record, state, after.as_ref()));
        self.summary_changed(&source);
        self.summary_changed(&destination);
        self.reply_moved(conn, id, &destination);
        crate::mark!("chat_moved");
        self.shared.log(LogLevel::Info, "chat.moved", Some(destination.clone()), format!("{} from {}", chat_uri, crate::ids::printable(&source)));
        if held {
            self.after_parked(&destination);
        }
    }

    /// A move's hold on `session_uri` ends with nothing written for it:
    /// what waited behind it runs.
    fn release_move_hold(&mut self, session_uri: &Uri) {
        let held = self.sessions.get_mut(session_uri).is_some_and(|s| matches!(s.work.parked.as_deref(), Some(Parked { work: ParkedWork::MoveHold, .. })));
        if held {
            if let Some(s) = self.sessions.get_mut(session_uri) {
                s.work.parked = None;
            }
            self.after_parked(session_uri);
        }
    }

    /// What follows any parked write's end on `session_uri` (as
    /// [`Host::on_parked_write`] does for the session whose write it was):
    /// a write owed meanwhile, what queued behind it, a queued message due.
    fn after_parked(&mut self, session_uri: &Uri) {
        if self.sessions.get_mut(session_uri).is_some_and(|s| std::mem::take(&mut s.work.put_owed)) {
            self.store_put(session_uri);
        }
        self.drain_inbox(session_uri);
        self.start_queued_if_due(session_uri, false);
    }

    /// Answers a move with the chat's session after it (`MoveChatResult`).
    fn reply_moved(&mut self, conn: ConnId, id: u64, session_uri: &Uri) {
        let result = MoveChatResult { session: session_uri.clone() };
        self.shared.reply(conn, id, serde_json::to_value(result).unwrap_or(Value::Null));
    }

    /// Whether a move holds `session_uri` (its chat leaving or arriving):
    /// such a session is not disposed until the move ends.
    pub(crate) fn moving(&self, session_uri: &Uri) -> bool {
        self.sessions.get(session_uri).and_then(|s| s.work.parked.as_deref()).is_some_and(|p| {
            matches!(p.work, ParkedWork::MoveIn(_) | ParkedWork::MoveOut(_) | ParkedWork::MoveHold)
        })
    }
}
