//! A chat moved (`moveChat`, issue 23 "Move"; ahp-types `MoveChatParams`;
//! docs/DECISIONS.md, 17), as each session takes its part: the order of a
//! session's chats (a move within one session), a chat leaving its session
//! ([`Session::take_moved_chat`]) and a chat arriving in another
//! ([`Session::put_moved_chat`]), and what a chat must not have in hand to
//! leave ([`Session::move_out_refusal`]). The checks that read both sessions,
//! the two writes and their order are `host/moves.rs`'s.

use ahp_types::actions::{SessionChatAddedAction, SessionChatRemovedAction, SessionChatsReorderedAction, StateAction};
use ahp_types::state::ChatState;
use ahp_types::Uri;

use crate::effect::BackendCmd;
use crate::shared::{Op, Shared};
use crate::record::ChatRecord;
use crate::session::state::{chat_state, chat_summary};
use crate::session::{Phase, Session};

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
    /// destination's to change. Returns the chat's record and its held
    /// state, or `None` when the session has no such chat.
    pub(crate) fn take_moved_chat(&mut self, sh: &mut Shared, chat: &Uri) -> Option<(ChatRecord, Option<ChatState>)> {
        let pos = self.record.chats.iter().position(|c| c.resource == *chat)?;
        let record = self.record.chats.remove(pos);
        self.work.starts_unanswered.retain(|_, c| c != chat);
        self.work.agents_owed.remove(chat);
        if let Some(ops) = self.phase.awaited_mut() {
            ops.retain(|op| !sh.starts_chat(op, chat));
        }
        if matches!(self.phase, Phase::Live { .. }) {
            self.backend(sh, Op::Fire, chat.clone(), BackendCmd::Close);
        }
        let session_uri = self.record.resource.clone();
        self.emit(sh, &session_uri, StateAction::SessionChatRemoved(SessionChatRemovedAction { chat: chat.clone() }), None);
        let state = self.resident.as_mut().and_then(|r| {
            r.turn_started_mono.remove(chat);
            r.chats.remove(chat)
        });
        Some((record, state))
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
