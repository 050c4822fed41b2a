//! A chat whose backend transcript is damaged (issue 25): the backend's
//! own copy of the conversation, what a wake resumes from, could not be
//! read back (`Outcome::TranscriptDamaged` to a resuming start, or a pass
//! over the transcripts that could not read it). The session stays listed,
//! its row at Error with words that say what to do ([`DAMAGED_TRANSCRIPT`],
//! no server path: the operator's log has the path), and every wake fails
//! with those words until a start reads the conversation again (the
//! transcript restored from a backup) or the session is disposed. The mark
//! is kept in the chat's record (`ChatRecord::damaged`), so it survives a
//! restart even though the backend moved the damaged file aside.

use ahp_types::Uri;

use super::state::{ACTIVITY_MASK, ERROR, IDLE};
use super::Session;
use crate::shared::Shared;

/// What a client reads of a session whose transcript is damaged: the row's
/// `activity`, and the -32603 a wake fails with. It names no server path.
pub const DAMAGED_TRANSCRIPT: &str = "the agent's transcript of this session is damaged and cannot be read back \
(the host moved it aside): dispose the session, or restore the transcript from a backup and open the session again";

impl Session {
    /// Whether any chat's transcript is marked damaged.
    pub fn transcript_damaged(&self) -> bool {
        self.record.chats.iter().any(|c| c.damaged)
    }

    /// The chats whose transcript is marked damaged, in the record's order.
    pub fn damaged_chats(&self) -> Vec<Uri> {
        self.record.chats.iter().filter(|c| c.damaged).map(|c| c.resource.clone()).collect()
    }

    /// Marks `chat`'s transcript damaged: its record's status rests at
    /// Error and the mark is written. Returns whether anything changed (the
    /// host then says the row changed).
    pub(crate) fn mark_transcript_damaged(&mut self, sh: &mut Shared, chat: &Uri) -> bool {
        let Some(c) = self.record.chats.iter_mut().find(|c| c.resource == *chat) else { return false };
        if c.damaged {
            return false;
        }
        crate::mark!("transcript_damaged_marked");
        c.damaged = true;
        c.status = (c.status & !ACTIVITY_MASK) | ERROR;
        self.store_put(sh);
        true
    }

    /// A start of `chat`'s agent read its conversation: a damage mark goes
    /// (the transcript was restored), and the chat's status rests where its
    /// history puts it (the Error was the mark's; the state a wake builds
    /// reads a last turn that failed as Error again). Returns whether it
    /// changed; the caller writes the record.
    pub(crate) fn clear_transcript_damaged(&mut self, chat: &Uri) -> bool {
        let Some(c) = self.record.chats.iter_mut().find(|c| c.resource == *chat && c.damaged) else { return false };
        crate::mark!("transcript_damage_cleared");
        c.damaged = false;
        c.status = (c.status & !ACTIVITY_MASK) | IDLE;
        true
    }
}
