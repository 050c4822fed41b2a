//! A chat's own read and archived bits (issue 23, part B, 1):
//! `chat/isReadChanged` and `chat/isArchivedChanged` from a client.
//!
//! They are the host's own like the session's (Sessions page, "The life of
//! a session": "what is this host's own is the read and archived bits"),
//! kept per chat in the chat's record (`ChatRecord::status`, the flags
//! beside the activity it rests at), written ahead of the echo
//! (docs/DECISIONS.md, 2), and taken without a wake, as a session's are:
//! nothing of the conversation is needed to mark a chat. The grant is the
//! session's `session:mark` (Sessions page, "Grants": "mark it read or
//! archived"). Once applied, the chat's summary on the session's chat list
//! (`session/chatUpdated`) and the session's catalogue row
//! (`root/sessionSummaryChanged`) carry the new bits (ahp-types:
//! "the host also synchronizes the addressed chat's `ChatSummary.status`
//! and `SessionChatSummary.status` projections").
//!
//! The session's own bits are not the chat's: marking a chat changes only
//! that chat. Archiving the default chat is refused: ahp-types says it "is
//! equivalent to archiving the session", and the session's
//! `session/isArchivedChanged` is the one way to do that here, so a row
//! never holds two archived bits that disagree.

use ahp_types::actions::{ActionOrigin, StateAction};
use ahp_types::Uri;

use crate::shared::Shared;
use crate::record::SessionRecord;
use crate::session::state::{IS_ARCHIVED, IS_READ};
use crate::session::Session;

/// Whether `action` is one of the two per-chat flag actions.
pub fn is_chat_flag_action(action: &StateAction) -> bool {
    matches!(action, StateAction::ChatIsReadChanged(_) | StateAction::ChatIsArchivedChanged(_))
}

/// The status bit `action` sets or clears, and whether it sets it; `None`
/// for any other action.
pub fn flag_of(action: &StateAction) -> Option<(u32, bool)> {
    match action {
        StateAction::ChatIsReadChanged(a) => Some((IS_READ, a.is_read)),
        StateAction::ChatIsArchivedChanged(a) => Some((IS_ARCHIVED, a.is_archived)),
        _ => None,
    }
}

/// Writes a flag action's bit into chat `chat`'s record (the write-ahead
/// part of [`Session::write_ahead`]); nothing for another action or an
/// unknown chat.
pub fn record_chat_flag(record: &mut SessionRecord, chat: &Uri, action: &StateAction) {
    let Some((bit, on)) = flag_of(action) else { return };
    if let Some(rec) = record.chats.iter_mut().find(|c| c.resource == *chat) {
        rec.status = if on { rec.status | bit } else { rec.status & !bit };
    }
}

impl Session {
    /// The checks a per-chat flag action must pass: dispatched on a chat
    /// channel of this session; the default chat is archived only with its
    /// session (module docs). Read from the record, so a session whose
    /// state was evicted is checked without a wake.
    pub fn check_chat_flag(&self, channel: &Uri, action: &StateAction) -> Result<(), String> {
        if *channel == self.record.resource {
            return Err("a chat action must be dispatched on a chat channel".into());
        }
        if !self.record.chats.iter().any(|c| c.resource == *channel) {
            return Err("no such chat".into());
        }
        if matches!(action, StateAction::ChatIsArchivedChanged(_)) && self.record.is_default_chat(channel) {
            crate::mark!("chat_archive_default_refused");
            return Err("the default chat is archived with its session: dispatch session/isArchivedChanged on the session".into());
        }
        Ok(())
    }

    /// Applies a checked, durable flag action on chat `channel`: the
    /// reducer and the echo, then the chat's summary on the session's list
    /// and the catalogue row. With the session's state not held (evicted),
    /// the record (already written ahead) is what the row reads.
    pub(crate) fn apply_chat_flag(&mut self, sh: &mut Shared, channel: &Uri, action: StateAction, origin: Option<ActionOrigin>) {
        if !self.emit(sh, channel, action, origin) {
            return;
        }
        if self.resident.is_some() {
            crate::mark!("chat_flag_applied_held");
            self.after_chat_change(sh, channel);
        } else {
            crate::mark!("chat_flag_applied_without_wake");
            self.summary_changed(sh);
        }
    }
}
