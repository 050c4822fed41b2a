//! A turn's rules that are the session's own: what an agent may say in it,
//! how long it ran by the host's clock, how a kept turn ends
//! (`crate::kept_turns`), and the title a first message gives an untitled
//! session.

use ahp_types::actions::StateAction;
use ahp_types::Uri;

use crate::kept_turns::KeptEnd;
use crate::session::Session;
use crate::time::MonoTime;

/// Longest title taken from a first message, in characters.
const TITLE_MAX_CHARS: usize = 80;

/// An agent's action that belongs to its chat's running turn
/// ([`Session::check_agent_action`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentTurnAction {
    /// The running turn it names.
    pub turn_id: String,
    /// Whether it ends the turn (`chat/turnComplete`, `chat/error`).
    pub ends_turn: bool,
    /// Whether the turn ended for good: not with an error the client may
    /// resume (such a turn gets its checkpoint when it ends again).
    pub for_good: bool,
}

/// Why an agent's action is not applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentActionRefusal {
    /// An action only a client may send.
    ClientsOnly,
    /// It names no running turn of the chat (a late event: counted stale).
    NotRunning,
}

impl Session {
    /// Checks an action `chat`'s agent sent: it must be of a kind only a
    /// server sends and name the chat's running turn; a turn's end gets the
    /// host's own duration at `now` (AHP 1.0: the host stamps durations).
    pub fn check_agent_action(&self, chat: &Uri, action: &mut StateAction, now: MonoTime) -> Result<AgentTurnAction, AgentActionRefusal> {
        use StateAction::*;
        let active = self.resident.as_ref().and_then(|r| r.chats.get(chat)).and_then(|c| c.active_turn.as_ref()).map(|t| t.id.as_str());
        let for_good = !matches!(&*action, ChatError(a) if a.part.resumable == Some(true));
        let duration = self.turn_duration(chat, now);
        let (turn_id, ends_turn) = match action {
            ChatResponsePart(a) => (a.turn_id.clone(), false),
            ChatDelta(a) => (a.turn_id.clone(), false),
            ChatReasoning(a) => (a.turn_id.clone(), false),
            ChatUsage(a) => (a.turn_id.clone(), false),
            ChatToolCallStart(a) => (a.turn_id.clone(), false),
            ChatToolCallDelta(a) => (a.turn_id.clone(), false),
            ChatToolCallReady(a) => (a.turn_id.clone(), false),
            ChatToolCallComplete(a) => (a.turn_id.clone(), false),
            ChatActivityChanged(_) => (active.unwrap_or_default().to_owned(), false),
            ChatTurnComplete(a) => {
                a.duration = duration;
                (a.turn_id.clone(), true)
            }
            ChatError(a) => {
                a.duration = duration;
                (a.turn_id.clone(), true)
            }
            _ => return Err(AgentActionRefusal::ClientsOnly),
        };
        if active != Some(turn_id.as_str()) {
            return Err(AgentActionRefusal::NotRunning);
        }
        Ok(AgentTurnAction { turn_id, ends_turn, for_good })
    }

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
