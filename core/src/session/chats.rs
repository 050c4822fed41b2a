//! A session's chats coming and going (Sessions page, "Commands":
//! `createChat`, "a second conversation in the session"; `disposeChat`,
//! "end one chat; the session's default chat is kept"), once the record
//! write that adds or drops the chat is durable. The checks and the write
//! ahead are `host/requests.rs`'s.

use ahp_types::actions::{SessionChatAddedAction, SessionChatRemovedAction, StateAction};
use ahp_types::Uri;

use crate::effect::BackendCmd;
use crate::shared::{Op, Shared};
use crate::record::ChatRecord;
use crate::session::state::{chat_state, chat_summary};
use crate::session::{Phase, Session};

impl Session {
    /// Adds chat `record`: to the record, to the state held, to the host's
    /// chat index, then `session/chatAdded`. A live session starts the
    /// chat's agent now; a waking one adds it to the wake, so the wake ends
    /// once it too has answered. Returns true when the session is asleep
    /// and must be woken for it.
    pub(crate) fn add_chat(&mut self, sh: &mut Shared, record: ChatRecord) -> bool {
        let chat_uri = record.resource.clone();
        let session_uri = self.record.resource.clone();
        let state = chat_state(&record, Vec::new(), false);
        let summary = chat_summary(&state);
        let conversation_id = record.conversation_id.to_string();
        self.record.chats.push(record);
        if let Some(resident) = self.resident.as_mut() {
            resident.chats.insert(chat_uri.clone(), state);
        }
        // A copy of the URI of its own: a session's rules do not reach the
        // table whose copy the restored chats share (`Host::index_chat`).
        sh.chats.insert(chat_uri.clone(), session_uri.as_str().into());
        self.emit(sh, &session_uri, StateAction::SessionChatAdded(SessionChatAddedAction { summary }), None);
        self.touch(sh);
        self.mark_activity(sh);
        match self.phase {
            Phase::Live { .. } | Phase::Waking(_) => {
                let command = BackendCmd::Start {
                    session: session_uri.clone(),
                    conversation_id,
                    working_directory: self.record.working_directories.first().cloned(),
                    peer_directories: sh.peers_for(&self.record),
                    resume: false,
                };
                let op = self.backend(sh, Op::Start { session: session_uri, chat: chat_uri.clone() }, chat_uri, command);
                if let Some(ops) = self.phase.awaited_mut() {
                    ops.insert(op);
                }
                false
            }
            Phase::Asleep => true,
            Phase::Starting(_) | Phase::Disposing(_) => false,
        }
    }

    /// Removes `chat`: from the record, from what waits on its agent (a
    /// late start answer must not name a conversation for a chat made anew
    /// under this URI, and a wake no longer waits for it: issue 19, seed
    /// 55746), its conversation deleted, `session/chatRemoved`, then from
    /// the state held, the host's chat index and every subscription (the
    /// channel is retired). `None` when the session has no such chat;
    /// else whether a wake now has every answer it waits for.
    pub(crate) fn remove_chat(&mut self, sh: &mut Shared, chat: &Uri) -> Option<bool> {
        let pos = self.record.chats.iter().position(|c| c.resource == *chat)?;
        let record = self.record.chats.remove(pos);
        self.work.pending_sends.retain(|(c, _, _)| c != chat);
        self.work.sends_in_flight.retain(|_, (c, _)| c != chat);
        let wake_done = self.forget_agent_of(sh, chat);
        self.backend(sh, Op::Fire, chat.clone(), BackendCmd::Delete { conversation_id: record.conversation_id.into() });
        let session_uri = self.record.resource.clone();
        self.emit(sh, &session_uri, StateAction::SessionChatRemoved(SessionChatRemovedAction { chat: chat.clone() }), None);
        if let Some(resident) = self.resident.as_mut() {
            resident.chats.remove(chat);
            resident.turn_started_mono.remove(chat);
        }
        sh.chats.remove(chat);
        sh.retired.insert(chat.clone());
        for c in sh.conns.values_mut() {
            c.subscriptions.remove(chat);
        }
        Some(wake_done)
    }

    /// `chat` leaves this session (disposed, or moved out): nothing of the
    /// session waits on its agent any more: not its starts still
    /// unanswered (a late answer must not name a conversation for a chat
    /// made anew under this URI: issue 19, seed 55746), not an agent it
    /// owes, not the wake, which no longer waits for its start nor keeps
    /// what it answered. Returns true when the session is waking and now
    /// has every answer it waits for: the caller ends the wake, as the
    /// last start's answer would have (sim seed 11569 at d163ccb: a chat
    /// moved out while its session woke left the wake waiting for ever).
    pub(crate) fn forget_agent_of(&mut self, sh: &Shared, chat: &Uri) -> bool {
        self.work.starts_unanswered.retain(|_, c| c != chat);
        self.work.agents_owed.remove(chat);
        self.work.moved_in.remove(chat);
        if let Some(ops) = self.phase.awaited_mut() {
            ops.retain(|op| !sh.starts_chat(op, chat));
        }
        if let Phase::Waking(wake) = &mut self.phase {
            wake.history.remove(chat);
        }
        self.phase.is_waking() && self.phase.awaited().is_some_and(|ops| ops.is_empty())
    }
}
