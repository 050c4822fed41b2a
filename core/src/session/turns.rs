//! A turn's rules that are the session's own: how long it ran by the
//! host's clock, how a kept turn ends (`crate::kept_turns`), and the title
//! a first message gives an untitled session.

use ahp_types::Uri;

use crate::kept_turns::KeptEnd;
use crate::session::Session;
use crate::time::MonoTime;

/// Longest title taken from a first message, in characters.
const TITLE_MAX_CHARS: usize = 80;

impl Session {
    /// How long `chat`'s running turn has run at `now`, in milliseconds of
    /// host time (0 when the host does not know its start): every turn
    /// end's `duration` is the host's own.
    pub fn turn_duration(&self, chat: &Uri, now: MonoTime) -> i64 {
        let started = self.resident.as_ref().and_then(|r| r.turn_started_mono.get(chat).copied());
        started.map_or(0, |t| i64::try_from(now.0.saturating_sub(t.0)).unwrap_or(i64::MAX))
    }

    /// A kept turn of `chat` ended (`crate::kept_turns`): the backend ended
    /// it (`how` `None`: its history has it, the host lets it go) or the
    /// host did (kept, with how). Written by the end's record write.
    pub fn end_kept_turn(&mut self, chat: &Uri, turn_id: &str, how: Option<KeptEnd>) {
        let Some(record) = self.record.chats.iter_mut().find(|c| c.resource == *chat) else { return };
        match how {
            None => crate::kept_turns::release(record, turn_id),
            Some(how) => crate::kept_turns::end(record, turn_id, how),
        };
    }

    /// The title an untitled session takes from its first message `text`:
    /// the first line, trimmed, cut to 80 characters on a character
    /// boundary; `None` when the session has a title or the line is empty.
    pub fn title_from_first_message(&self, text: &str) -> Option<String> {
        if !self.record.title.is_empty() {
            return None;
        }
        let title: String = text.lines().next().unwrap_or("").trim().chars().take(TITLE_MAX_CHARS).collect();
        (!title.is_empty()).then_some(title)
    }
}
