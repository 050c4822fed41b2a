//! A turn's rules that are the session's own: what an agent may say in it,
//! how long it ran by the host's clock, how a kept turn ends
//! (`crate::kept_turns`), and the title a first message gives an untitled
//! session.

use ahp_types::actions::{ChatErrorAction, SessionCreationFailedAction, SessionReadyAction, StateAction};
use ahp_types::state::{ErrorInfo, ErrorResponsePart, Message, SessionLifecycle};
use ahp_types::Uri;

use crate::effect::LogLevel;
use crate::shared::Shared;
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
            // A question is asked in the running turn (`session/questions.rs`).
            ChatInputRequested(_) => (active.unwrap_or_default().to_owned(), false),
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

    /// Ends `chat`'s turn `turn_id` with `chat/error` carrying `message`,
    /// when it is the one running (kept with how it ended); a turn still
    /// held for its agent is dropped (never handed over later). Returns
    /// whether it was running.
    pub(crate) fn error_turn(&mut self, sh: &mut Shared, chat: &Uri, turn_id: &str, message: &str) -> bool {
        self.work.pending_sends.retain(|(c, t, _)| !(c == chat && t == turn_id));
        let running = self.resident.as_ref().and_then(|r| r.chats.get(chat)).and_then(|c| c.active_turn.as_ref()).is_some_and(|t| t.id == turn_id);
        if running {
            let action = StateAction::ChatError(ChatErrorAction {
                turn_id: turn_id.to_owned(),
                duration: self.turn_duration(chat, sh.now.mono),
                part: ErrorResponsePart {
                    error: ErrorInfo { error_type: "backendError".to_owned(), message: message.to_owned(), stack: None, meta: None },
                    resumable: Some(false),
                },
                meta: None,
            });
            self.emit(sh, chat, action, None);
            self.end_kept_turn(chat, turn_id, Some(KeptEnd::Error(message.to_owned())));
        }
        running
    }

    /// A turn of a session still provisional failed: so did its creation
    /// (`session/creationFailed` with `message`), and its start is owed to
    /// the next send (Sessions page, "Provisional sessions": "held with its
    /// start owed"). Returns the turns its other chats held for the start,
    /// for the host to end; `None`, with nothing done, for an announced
    /// session.
    pub(crate) fn fail_creation(&mut self, sh: &mut Shared, message: &str) -> Option<Vec<crate::session::in_hand::HeldSend>> {
        if self.is_announced() {
            return None;
        }
        let action = StateAction::SessionCreationFailed(SessionCreationFailedAction {
            error: ErrorInfo { error_type: "creationFailed".to_owned(), message: message.to_owned(), stack: None, meta: None },
        });
        let session_uri = self.record.resource.clone();
        self.emit(sh, &session_uri, action, None);
        self.start_owed = true;
        // Turns of its other chats held for the agents' start (a
        // `createChat` with a first message while the session was
        // provisional) waited on the start that failed: they go back to
        // the host to end with it, and the session sleeps holding none
        // (`inv_asleep_runs_no_turn`; sim seeds 17838, 52039, 62971 at
        // d163ccb: one such turn was held for ever).
        Some(std::mem::take(&mut self.work.pending_sends))
    }

    /// What a turn's end does to its session, first: its clock stops,
    /// activity is noted, the chat is mirrored.
    pub(crate) fn turn_ended(&mut self, sh: &mut Shared, chat: &Uri) {
        if let Some(resident) = self.resident.as_mut() {
            resident.turn_started_mono.remove(chat);
        }
        self.mark_activity(sh);
        self.after_chat_change(sh, chat);
    }

    /// The session's first turn went to its backend (or a retry after a
    /// failed creation did): `session/ready`, once, and no start is owed.
    /// The host announced it just before.
    pub(crate) fn ready(&mut self, sh: &mut Shared) {
        let lifecycle = self.resident.as_ref().map(|r| r.session.lifecycle.clone());
        if lifecycle.is_some_and(|l| l != SessionLifecycle::Ready) {
            let session_uri = self.record.resource.clone();
            self.emit(sh, &session_uri, StateAction::SessionReady(SessionReadyAction {}), None);
            crate::mark!("session_ready_after_announce");
            sh.log(LogLevel::Info, "session.ready", Some(session_uri), String::new());
        }
        self.start_owed = false;
    }

    /// The agent took a turn of `chat`: the chat's conversation exists, so
    /// a wake resumes it rather than starting it afresh.
    pub(crate) fn conversation_exists(&mut self, chat: &Uri) {
        if let Some(c) = self.record.chats.iter_mut().find(|c| c.resource == *chat) {
            c.fresh = false;
        }
    }

    /// The turns held for `chat`'s agent while it started, taken to be
    /// handed over (or failed); `None` while the session's first git
    /// command is out (they wait for it).
    pub(crate) fn take_held_sends(&mut self, chat: &Uri) -> Option<Vec<(Uri, String, std::sync::Arc<Message>)>> {
        if self.work.git_begin.is_some() {
            return None;
        }
        let (held, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.work.pending_sends).into_iter().partition(|(c, _, _)| c == chat);
        self.work.pending_sends = rest;
        Some(held)
    }
}
