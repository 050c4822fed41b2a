//! A chat moved (`moveChat`, issue 23 "Move"; ahp-types `MoveChatParams`;
//! docs/DECISIONS.md, 17), as each session takes its part: the order of a
//! session's chats (a move within one session), a chat leaving its session
//! ([`Session::take_moved_chat`]) and a chat arriving in another
//! ([`Session::put_moved_chat`]), and what a chat must not have in hand to
//! leave ([`Session::move_out_refusal`]), and each session's part of the two
//! writes (the checks a request makes of it, the write parked, the hold, the
//! chat taken or put). Which session goes first, the checks that compare
//! the two and the reply are the request routing's (`host/requests.rs`,
//! "Moving a chat").

use ahp_types::actions::{SessionChatAddedAction, SessionChatRemovedAction, SessionChatsReorderedAction, StateAction};
use ahp_types::state::ChatState;
use ahp_types::Uri;

use ahp_types::messages::JsonRpcError;

use crate::continuation::MoveChatReq;
use crate::effect::{BackendCmd, ConnId, LogLevel, OpId};
use crate::protocol::error::{error, INVALID_PARAMS, SESSION_NOT_FOUND};
use crate::shared::{Op, Shared};
use crate::record::{ChatRecord, Moved};
use crate::session::state::{chat_state, chat_summary};
use crate::session::{MoveWork, Parked, ParkedWork, Phase, Session};

/// Where a chat goes in `chats` (a session's order): right after `after`,
/// or first when `after` is `None` or names no chat of the list (ahp-types
/// `ChatMoveToSessionDestination.after`: "When omitted, the requested chat
/// is placed at the beginning of the catalog").
fn position_after(chats: &[ChatRecord], after: Option<&Uri>) -> usize {
    after.and_then(|a| chats.iter().position(|c| c.resource == *a)).map_or(0, |i| i + 1)
}

/// Puts `chat` into `chats` after `after` (first when `None`): the
/// destination's record as a move writes it.
pub fn place(chats: &mut Vec<ChatRecord>, chat: ChatRecord, after: Option<&Uri>) {
    chats.retain(|c| c.resource != chat.resource);
    let at = position_after(chats, after);
    chats.insert(at, chat);
}

/// Moves `chat` of `chats` to right after `after` (first when `None`): the
/// record of a move within one session. Nothing changes when `chat` is not
/// in the list.
pub fn reorder(chats: &mut Vec<ChatRecord>, chat: &Uri, after: Option<&Uri>) {
    let Some(from) = chats.iter().position(|c| c.resource == *chat) else { return };
    let record = chats.remove(from);
    let at = position_after(chats, after);
    chats.insert(at, record);
}

impl Session {
    /// The URIs of this session's chats in its order (the record's), as
    /// `session/chatsReordered` carries them: "every chat currently in the
    /// session exactly once".
    pub fn chat_order(&self) -> Vec<Uri> {
        self.record.chats.iter().map(|c| c.resource.clone()).collect()
    }

    /// Why `chat` may not leave this session for another now, in words a
    /// client is answered with (-32602); `None` when it may. A chat leaves
    /// with nothing in hand: no turn running (and so no question open), no
    /// message on its way to its agent or its agent's start unanswered, no
    /// queued or steering message, no rewind's forget owed to its backend
    /// (each of those belongs to the agent it leaves behind).
    pub fn move_out_refusal(&self, chat: &Uri) -> Option<&'static str> {
        let record = self.record.chats.iter().find(|c| c.resource == *chat)?;
        if self.record.is_default_chat(chat) {
            return Some("the session's default chat is not movable");
        }
        let running = self.resident.as_ref().and_then(|r| r.chats.get(chat)).is_some_and(|c| c.active_turn.is_some());
        if running || self.work.busy_chats.contains(chat) {
            crate::mark!("move_refused_turn_running");
            return Some("the chat has a turn running: move it once the turn has ended");
        }
        let in_flight = self.work.pending_sends.iter().any(|(c, _, _)| c == chat)
            || self.work.sends_in_flight.values().any(|(c, _)| c == chat)
            || self.work.starts_unanswered.values().any(|c| c == chat);
        if in_flight {
            crate::mark!("move_refused_agent_busy");
            return Some("the chat's agent is starting or a message is on its way to it: try again");
        }
        if !record.queued.is_empty() || record.steering.is_some() {
            crate::mark!("move_refused_messages_pending");
            return Some("the chat has queued or steering messages: remove them or let them run first");
        }
        if !record.forgetting.is_empty() {
            crate::mark!("move_refused_forget_owed");
            return Some("the chat's backend has not yet forgotten the turns a rewind took away: try again");
        }
        None
    }

    /// Moves `chat` after `after` (first when `None`) in this session's
    /// order once the write is durable: the record, then
    /// `session/chatsReordered` with the complete order (ahp-types
    /// `SessionChatsReorderedAction`). Nothing is sent when the order is
    /// as it was.
    pub(crate) fn apply_reorder(&mut self, sh: &mut Shared, chat: &Uri, after: Option<&Uri>) {
        let before = self.chat_order();
        reorder(&mut self.record.chats, chat, after);
        let order = self.chat_order();
        if order == before {
            crate::mark!("move_reorder_unchanged");
            return;
        }
        let session_uri = self.record.resource.clone();
        self.emit(sh, &session_uri, StateAction::SessionChatsReordered(SessionChatsReorderedAction { chats: order }), None);
        crate::mark!("move_reordered");
    }

    /// Takes `chat` out of this session, whose record without it is
    /// durable: from the record and what waits on its agent, its agent let
    /// go keeping the conversation (`BackendCmd::Close`, never a delete),
    /// `session/chatRemoved`, then from the state held. Its subscribers
    /// keep their subscription, and the host's chat index is the
    /// destination's to change. Returns the chat's record, its held state
    /// and whether a wake now has every answer it waits for
    /// ([`Session::forget_agent_of`]), or `None` when the session has no
    /// such chat.
    pub(crate) fn take_moved_chat(&mut self, sh: &mut Shared, chat: &Uri) -> Option<(ChatRecord, Option<ChatState>, bool)> {
        let pos = self.record.chats.iter().position(|c| c.resource == *chat)?;
        let record = self.record.chats.remove(pos);
        let wake_done = self.forget_agent_of(sh, chat);
        // A waking session has asked the chat's agent to start: that agent
        // is let go too, or it would run on beside the destination's.
        if matches!(self.phase, Phase::Live { .. } | Phase::Waking(_)) {
            self.backend(sh, Op::Fire, chat.clone(), BackendCmd::Close);
        }
        let session_uri = self.record.resource.clone();
        self.emit(sh, &session_uri, StateAction::SessionChatRemoved(SessionChatRemovedAction { chat: chat.clone() }), None);
        let state = self.resident.as_mut().and_then(|r| {
            r.turn_started_mono.remove(chat);
            r.chats.remove(chat)
        });
        Some((record, state, wake_done))
    }

    /// Puts chat `record` (moved from another session, both records
    /// durable) into this one after `after` (first when `None`): the
    /// record, the state held (`state`, the chat's as its source held it,
    /// else read from its record), the host's chat index,
    /// `session/chatAdded` and, when it is not last,
    /// `session/chatsReordered`; `modifiedAt` moves forward to the chat's
    /// own where that is later. A live or waking session starts the chat's
    /// agent on its conversation (`resume`, unless it never began); an
    /// asleep one starts it at its next wake, as every chat.
    pub(crate) fn put_moved_chat(&mut self, sh: &mut Shared, record: ChatRecord, state: Option<ChatState>, after: Option<&Uri>) {
        let chat_uri = record.resource.clone();
        let session_uri = self.record.resource.clone();
        let conversation_id = record.conversation_id.to_string();
        let resume = !record.fresh;
        let modified = record.modified_at.time();
        let mut summary = chat_summary(state.as_ref().unwrap_or(&chat_state(&record, Vec::new(), false)));
        summary.changes = record.changes.as_deref().cloned();
        summary.movable = Some(true);
        place(&mut self.record.chats, record, after);
        if let Some(resident) = self.resident.as_mut() {
            let state = match state {
                Some(state) => state,
                None => {
                    let rec = self.record.chats.iter().find(|c| c.resource == chat_uri);
                    match rec {
                        Some(rec) => chat_state(rec, Vec::new(), false),
                        None => return,
                    }
                }
            };
            resident.chats.insert(chat_uri.clone(), state);
        } else if let Some(state) = state {
            // This session's state is not held: the chat's waits for the
            // next wake, which would otherwise rebuild it from the
            // backend's history under a client that watches the chat.
            crate::mark!("move_into_unheld_keeps_chat_state");
            self.work.moved_in.insert(chat_uri.clone(), state);
        }
        sh.chats.insert(chat_uri.clone(), session_uri.as_str().into());
        self.emit(sh, &session_uri, StateAction::SessionChatAdded(SessionChatAddedAction { summary }), None);
        if self.record.chats.last().is_none_or(|c| c.resource != chat_uri) {
            let order = self.chat_order();
            self.emit(sh, &session_uri, StateAction::SessionChatsReordered(SessionChatsReorderedAction { chats: order }), None);
        }
        if let Some(to) = modified {
            self.advance_modified(sh, to);
        }
        self.touch(sh);
        self.mark_activity(sh);
        if matches!(self.phase, Phase::Live { .. } | Phase::Waking(_)) {
            let command = BackendCmd::Start {
                session: session_uri.clone(),
                conversation_id,
                working_directory: self.record.working_directories.first().cloned(),
                peer_directories: sh.peers_for(&self.record),
                resume,
            };
            let op = self.backend(sh, Op::Start { session: session_uri, chat: chat_uri.clone() }, chat_uri, command);
            if let Some(ops) = self.phase.awaited_mut() {
                ops.insert(op);
            }
        }
    }
}

/// A move as one session takes part in it: the checks a `moveChat` makes of
/// the source or the destination alone, and each of the two writes' parts
/// (docs/DECISIONS.md, 17). The request routing (`host/requests.rs`) calls
/// these in the order the module docs give and applies what they return.
impl Session {
    /// Why a `moveChat` naming `chat` of this session (its source) is
    /// refused before anything is written: the chat is the session's
    /// default chat (-32602, "movable: false").
    pub(crate) fn move_source_refusal(&self, chat: &Uri) -> Option<JsonRpcError> {
        if self.record.is_default_chat(chat) {
            crate::mark!("move_refused_default_chat");
            return Some(error(INVALID_PARAMS, "the session's default chat is not movable (movable: false)"));
        }
        None
    }

    /// Why this session (the destination) refuses `chat` placed after
    /// `after`: a chat after itself, or an anchor that is not one of its
    /// chats (-32602).
    pub(crate) fn move_anchor_refusal(&self, chat: &Uri, after: Option<&Uri>) -> Option<JsonRpcError> {
        let after = after?;
        if after == chat {
            crate::mark!("move_refused_anchor");
            return Some(error(INVALID_PARAMS, "a chat cannot be placed after itself: name another chat of the destination as after"));
        }
        if !self.record.chats.iter().any(|c| c.resource == *after) {
            crate::mark!("move_refused_anchor");
            return Some(error(INVALID_PARAMS, format!("{} is not a chat of the destination session", crate::ids::printable(after))));
        }
        None
    }

    /// Why this session takes no part in a move now, source or
    /// destination: it is being disposed (-32001) or still being created
    /// (-32602).
    pub(crate) fn move_phase_refusal(&self) -> Option<JsonRpcError> {
        match self.phase {
            Phase::Disposing { .. } => Some(error(SESSION_NOT_FOUND, format!("session {} is being disposed", crate::ids::printable(&self.record.resource)))),
            Phase::Starting { .. } => Some(error(INVALID_PARAMS, format!("session {} is still being created", crate::ids::printable(&self.record.resource)))),
            _ => None,
        }
    }

    /// The agent this session runs (its provider): a chat moves only
    /// between sessions of the same one.
    pub(crate) fn provider(&self) -> &str {
        &self.record.provider
    }

    /// Why this session refuses to take a moved chat now, in words a client
    /// reads (-32602): its creation failed (its next wake starts every
    /// chat afresh, so the moved conversation would be lost), or it is
    /// waking.
    pub(crate) fn move_in_refusal(&self) -> Option<&'static str> {
        if self.start_owed {
            crate::mark!("move_refused_destination_start_owed");
            return Some("the destination session failed to start: send it a message first");
        }
        if self.phase.is_waking() {
            crate::mark!("move_refused_destination_waking");
            return Some("the destination session is waking: try again");
        }
        None
    }

    /// Whether a move whose source is this session waits for its wake: its
    /// state is not held, and the chat's held state goes with it (as
    /// `createChat` wakes its session).
    pub(crate) fn move_needs_wake(&self) -> bool {
        self.resident.is_none()
    }

    /// Holds request `id` of `conn` (a move out of this session) until this
    /// session's wake ([`Session::move_needs_wake`]); the host wakes it.
    pub(crate) fn move_waits_for_wake(&mut self, conn: ConnId, id: u64, request: MoveChatReq) {
        crate::mark!("move_wakes_source");
        self.work.waiters.push(crate::session::Waiter::Request { conn, id, request: crate::continuation::WaitingRequest::MoveChat(request) });
    }

    /// The chat `chat` of this session (the source) as a move to another
    /// session carries it: under its next move generation, with the
    /// settings it ran on as its own from its first move on (Sessions page:
    /// "a chat moved to another session [starts] with what it ran on").
    /// `Err` is why it may not leave now ([`Session::move_out_refusal`]);
    /// `Ok(None)` when the session has no such chat.
    pub(crate) fn chat_to_move(&self, chat: &Uri) -> Result<Option<ChatRecord>, &'static str> {
        if let Some(reason) = self.move_out_refusal(chat) {
            return Err(reason);
        }
        let Some(mut record) = self.record.chats.iter().find(|c| c.resource == *chat).cloned() else { return Ok(None) };
        let config = record.moved.as_ref().map_or_else(|| self.record.config.clone(), |m| m.config.clone());
        record.moved = Some(Box::new(Moved { moves: record.moves() + 1, config }));
        Ok(Some(record))
    }

    /// The first write of a move, on this session (the destination): its
    /// record with the chat, parked. Returns the write's op, which holds
    /// the source meanwhile ([`Session::hold_for_move`]).
    pub(crate) fn park_move_in(&mut self, sh: &mut Shared, work: MoveWork) -> Option<OpId> {
        self.park(sh, ParkedWork::MoveIn(Box::new(work)), None);
        self.work.parked.as_ref().map(|p| p.op)
    }

    /// The second write of a move, on this session (the source): the hold
    /// of the first write let go, its record without the chat parked.
    /// Returns the write's op, which holds the destination meanwhile.
    pub(crate) fn park_move_out(&mut self, sh: &mut Shared, work: Box<MoveWork>) -> Option<OpId> {
        self.work.parked = None;
        self.park(sh, ParkedWork::MoveOut(work), None);
        self.work.parked.as_ref().map(|p| p.op)
    }

    /// Holds this session while the other session's write `op` of a move is
    /// in flight ([`ParkedWork::MoveHold`]).
    pub(crate) fn hold_for_move(&mut self, op: OpId) {
        self.work.parked = Some(Box::new(Parked { op, work: ParkedWork::MoveHold, kept: None }));
    }

    /// Ends a move's hold on this session, if one holds it; true when it
    /// did (what waited behind it runs then).
    pub(crate) fn release_move_hold(&mut self) -> bool {
        let held = matches!(self.work.parked.as_deref(), Some(Parked { work: ParkedWork::MoveHold, .. }));
        if held {
            self.work.parked = None;
        }
        held
    }

    /// Whether a move holds this session (its chat leaving or arriving):
    /// such a session is not disposed until the move ends.
    pub(crate) fn is_moving(&self) -> bool {
        self.work.parked.as_deref().is_some_and(|p| matches!(p.work, ParkedWork::MoveIn(_) | ParkedWork::MoveOut(_) | ParkedWork::MoveHold))
    }

    /// Whether a write was owed while a write was parked; the debt is
    /// taken (the caller writes the record).
    pub(crate) fn take_put_owed(&mut self) -> bool {
        std::mem::take(&mut self.work.put_owed)
    }

    /// The second write of a move (this session's record without the chat
    /// `chat`, as the move carried it) finished: the chat leaves
    /// ([`Session::take_moved_chat`]). A failed write does not undo the
    /// move: the destination's record holds the chat under the higher
    /// generation, which wins at restore; this record is written again
    /// (logged). Returns the chat's record (its move generation the
    /// carried one) and its held state for the destination, and whether
    /// this session's wake now has every answer it waits for (the host
    /// ends it).
    pub(crate) fn moved_out(&mut self, sh: &mut Shared, chat: ChatRecord, failure: Option<String>) -> (ChatRecord, Option<ChatState>, bool) {
        if let Some(message) = failure {
            crate::mark!("move_source_write_failed");
            sh.log(LogLevel::Warn, "move.source_not_saved", Some(self.record.resource.clone()), format!(
                "the record without {} is written again: {message}", crate::ids::printable(&chat.resource)
            ));
            self.work.put_owed = true;
        }
        match self.take_moved_chat(sh, &chat.resource) {
            Some((mut record, state, wake_done)) => {
                record.moved = chat.moved;
                (record, state, wake_done)
            }
            None => (chat, None, false),
        }
    }
}
