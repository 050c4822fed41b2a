//! Rewinding a chat (issue 23, part B, 2): `chat/truncated` from a client
//! keeps the chat's turns up to the one it names (or none) and forgets the
//! rest, grant `chat:truncate` (Sessions page, "Grants": "Rewind one").
//!
//! Taken only where the backend can forget (`AgentSpec::forgets`: the echo
//! agent; an ACP agent is refused with the reason and nothing changes),
//! and only while no turn runs or waits to be sent in the chat (the
//! reducer would drop a running turn silently; a turn the agent still
//! runs would be written into its history after the forget).
//!
//! Durability and crashes (docs/DECISIONS.md, 13). The turns a rewind takes
//! away are written into the chat's record (`ChatRecord::forgetting`) in
//! the same write-ahead as the action, before its echo (docs/DECISIONS.md,
//! 2); then the backend is asked to forget them (`BackendCmd::Forget`, an
//! op of its own, `Op::Forget`); its answer takes them off the record. The
//! backend's history is the conversation, so until it answers, every
//! history read back from it (a wake, a restart, an export) leaves the
//! listed turns out ([`without_forgotten`], applied in
//! `session::state::chat_state`), and every start of the chat's agent asks
//! the backend again ([`Session::forget_owed`]). A crash between the write
//! and the forget therefore shows the rewound history, and the next wake
//! makes the backend's copy agree. A crash before the write loses the
//! rewind, which was never echoed. Forgetting is idempotent, so a forget
//! asked twice is harmless, and a turn id once forgotten is not taken
//! again while the forget is owed (`check_client_action`), so a new turn is
//! never filtered out with an old one.
//!
//! Checkpoints and change counts: a rewound turn's checkpoint ref
//! (`refs/agents/<sid>/checkpoints/turn/<N>`, numbered over the session's
//! turn ends, never reused) is kept until `disposeSession`, and neither the
//! tree nor the counts move: a rewind forgets a conversation, it does not
//! undo files (never a `git reset` of the user's tree). docs/DECISIONS.md,
//! 13.

use ahp_types::actions::{ActionOrigin, ChatTruncatedAction, StateAction};
use ahp_types::state::Turn;
use ahp_types::Uri;

use crate::effect::{BackendCmd, LogLevel};
use crate::shared::{Op, Shared};
use crate::input::Outcome;
use crate::record::{ChatRecord, SessionRecord};
use crate::session::{Phase, Session};

/// The refusal a client reads when the session's agent cannot forget.
pub const CANNOT_FORGET: &str = "this session's agent cannot forget turns: a rewind (chat/truncated) is not offered by it";

/// `turns` without those a rewind took away and the backend has not
/// confirmed forgetting (`chat.forgetting`).
pub fn without_forgotten(chat: &ChatRecord, mut turns: Vec<Turn>) -> Vec<Turn> {
    if !chat.forgetting.is_empty() {
        turns.retain(|t| !chat.forgetting.contains(&t.id));
    }
    turns
}

/// Writes a rewind of chat `chat` into `record`: the turns `dropped` are
/// owed a forget, and any of them the host kept is let go (its history is
/// gone with it).
pub fn record_truncation(record: &mut SessionRecord, chat: &Uri, dropped: &[String]) {
    let Some(rec) = record.chats.iter_mut().find(|c| c.resource == *chat) else { return };
    for id in dropped {
        if !rec.forgetting.contains(id) {
            rec.forgetting.push(id.clone());
        }
    }
    rec.kept.retain(|k| !dropped.contains(&k.id));
    // A fork's own copy of its source's turns goes with them.
    rec.seed.retain(|t| !dropped.contains(&t.id));
}

impl Session {
    /// The checks a `chat/truncated` on chat `channel` must pass (module
    /// docs): a backend that forgets, no turn running or waiting to be
    /// sent in the chat, and a kept turn that the chat holds.
    pub fn check_truncate(&self, channel: &Uri, action: &ChatTruncatedAction, forgets: bool) -> Result<(), String> {
        // On a chat channel: `check_client_action` refused a session channel
        // before it reached here.
        if !forgets {
            crate::mark!("rewind_refused_cannot_forget");
            return Err(CANNOT_FORGET.into());
        }
        let resident = self.resident.as_ref().ok_or("the session's state is not loaded")?;
        let chat = resident.chats.get(channel).ok_or("no such chat")?;
        if chat.active_turn.is_some() || self.work.pending_sends.iter().any(|(c, _, _)| c == channel) {
            crate::mark!("rewind_refused_turn_running");
            return Err("a turn is running in this chat: a rewind waits until it ends or is cancelled".into());
        }
        if let Some(id) = &action.turn_id {
            if !chat.turns.iter().any(|t| t.id == *id) {
                crate::mark!("rewind_refused_unknown_turn");
                return Err("no such turn in this chat".into());
            }
        }
        Ok(())
    }

    /// The ids of the turns of `chat` a rewind keeping `keep` (none: every
    /// turn goes) takes away, oldest first, as the held state has them.
    pub fn truncated_away(&self, chat: &Uri, keep: Option<&str>) -> Vec<String> {
        let Some(state) = self.resident.as_ref().and_then(|r| r.chats.get(chat)) else { return Vec::new() };
        let from = match keep {
            None => 0,
            Some(id) => match state.turns.iter().position(|t| t.id == id) {
                Some(i) => i + 1,
                None => state.turns.len(),
            },
        };
        state.turns[from..].iter().map(|t| t.id.clone()).collect()
    }

    /// Applies a checked, durable rewind on `channel` (its record already
    /// lists the turns it takes away): the reducer and the echo, the
    /// chat's summary and the row, then the backend is asked to forget.
    pub(crate) fn apply_truncate(&mut self, sh: &mut Shared, channel: &Uri, action: ChatTruncatedAction, origin: Option<ActionOrigin>) {
        let dropped = self.truncated_away(channel, action.turn_id.as_deref());
        if !self.emit(sh, channel, StateAction::ChatTruncated(action), origin) {
            return;
        }
        crate::mark!("rewind_applied");
        self.mark_activity(sh);
        self.after_chat_change(sh, channel);
        if !dropped.is_empty() {
            self.ask_forget(sh, channel);
        }
    }

    /// Asks `chat`'s backend to forget every turn its record still owes a
    /// forget, if any (a rewind's, or one a crash or a failure left owed).
    fn ask_forget(&mut self, sh: &mut Shared, chat: &Uri) {
        if matches!(self.phase, Phase::Disposing(_)) {
            return;
        }
        let Some(rec) = self.record.chats.iter().find(|c| c.resource == *chat) else { return };
        if rec.forgetting.is_empty() || rec.fresh {
            return;
        }
        let (conversation_id, turn_ids) = (rec.conversation_id.to_string(), rec.forgetting.to_vec());
        let op = Op::Forget { session: self.record.resource.clone(), chat: chat.clone(), turn_ids: turn_ids.clone() };
        self.backend(sh, op, chat.clone(), BackendCmd::Forget { conversation_id, turn_ids });
    }

    /// `chat`'s agent answered a start: a forget still owed is asked again
    /// (module docs: how a crash between the write and the forget
    /// converges).
    pub(crate) fn forget_owed(&mut self, sh: &mut Shared, chat: &Uri) {
        if self.record.chats.iter().any(|c| c.resource == *chat && !c.forgetting.is_empty()) {
            crate::mark!("rewind_forget_asked_again");
            self.ask_forget(sh, chat);
        }
    }

    /// The backend answered a forget of `turn_ids` of `chat`: once done,
    /// the record no longer owes them; a failure leaves them owed (asked
    /// again at the chat's next start) and is logged.
    pub(crate) fn forget_answered(&mut self, sh: &mut Shared, chat: &Uri, turn_ids: &[String], outcome: Outcome) {
        if let Outcome::Failed { message } = outcome {
            crate::mark!("rewind_forget_failed");
            sh.log(LogLevel::Warn, "backend.forget_failed", Some(self.record.resource.clone()), message);
            return;
        }
        let Some(rec) = self.record.chats.iter_mut().find(|c| c.resource == *chat) else { return };
        let before = rec.forgetting.len();
        rec.forgetting.retain(|id| !turn_ids.contains(id));
        if rec.forgetting.len() != before {
            crate::mark!("rewind_forgotten");
            self.store_put(sh);
        }
    }
}
