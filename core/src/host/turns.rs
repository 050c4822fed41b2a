//! The life of a turn in the host: handed to its chat's agent (after a
//! wake, the chat's agent start, or the session's first git command), taken
//! by the agent (which announces a provisional session), ended (completed,
//! cancelled or failed), and what every end does.
//!
//! What only reads and writes the session is the session's own
//! (`session/agents.rs`, `session/turns.rs`); this file sequences it with
//! what reaches past the session (a wake, the count of active sessions,
//! the catalogue, checkpoints).

use ahp_types::Uri;

use super::Host;
use crate::effect::LogLevel;
use crate::session::Phase;

impl Host {
    /// How long `chat`'s running turn has run, in ms of host time
    /// ([`Session::turn_duration`](crate::session::Session::turn_duration)).
    pub(crate) fn turn_duration(&self, session_uri: &Uri, chat: &Uri) -> i64 {
        self.sessions.get(session_uri).map_or(0, |s| s.turn_duration(chat, self.shared.now.mono))
    }

    /// A kept turn ended ([`Session::end_kept_turn`](crate::session::Session::end_kept_turn)).
    pub(crate) fn kept_turn_ended(&mut self, session_uri: &Uri, chat: &Uri, turn_id: &str, how: Option<crate::kept_turns::KeptEnd>) {
        if let Some(s) = self.sessions.get_mut(session_uri) {
            s.end_kept_turn(chat, turn_id, how);
        }
    }

    /// Hands a started turn to the chat's agent, waking the session first
    /// when its agent is not running.
    pub(crate) fn send_turn(&mut self, session_uri: &Uri, chat: Uri, turn_id: String, message: ahp_types::state::Message) {
        let live = self.sessions.get(session_uri).is_some_and(|s| s.phase == Phase::Live && !s.start_owed);
        // A session's first send asks git first (its tree and `turn/0`);
        // a sleeping session is woken first and asks once it is live.
        if live && self.hold_for_git(session_uri, &chat, &turn_id, &message) {
            return;
        }
        if live {
            self.in_session(session_uri, |s, sh| s.hand_to_agent(sh, chat, turn_id, message));
            return;
        }
        let Some(session) = self.sessions.get_mut(session_uri) else { return };
        session.pending_sends.push((chat, turn_id, message));
        self.wake(session_uri);
    }

    /// The agent of `chat` in a live session answered its start: the turns
    /// it held go to it, or fail with the start's `failure`. Turns still
    /// waiting for the session's first git command stay for it.
    pub(crate) fn chat_start_answered(&mut self, session_uri: &Uri, chat: &Uri, failure: Option<&str>) {
        let Some(held) = self.sessions.get_mut(session_uri).and_then(|s| s.take_held_sends(chat)) else { return };
        for (chat, turn_id, message) in held {
            match failure {
                Some(message) => self.fail_turn(session_uri, &chat, &turn_id, &format!("the chat's agent would not start: {message}")),
                None => {
                    self.in_session(session_uri, |s, sh| s.hand_to_agent(sh, chat, turn_id, message));
                }
            }
        }
    }

    /// The agent took a turn of `chat` (its send was acknowledged, or the
    /// agent spoke in it, whichever is heard first: a late answer is stale
    /// after a sleep). Its conversation exists, so a wake resumes it rather
    /// than starting it afresh, and a provisional session is announced
    /// (issue 19, seeds 326 and 1631: a wake after a lost answer started
    /// the conversation again and the turns it had taken were gone).
    pub(crate) fn agent_took_turn(&mut self, session_uri: &Uri, chat: &Uri) {
        if let Some(s) = self.sessions.get_mut(session_uri) {
            s.conversation_exists(chat);
        }
        self.mark_ready(session_uri);
    }

    /// Ends a running turn with `chat/error` carrying `message`. For a
    /// session still provisional this also fails its creation:
    /// `session/creationFailed` after the turn's error, then
    /// `root/sessionAdded`, and its start is owed to the next send.
    pub(crate) fn fail_turn(&mut self, session_uri: &Uri, chat: &Uri, turn_id: &str, message: &str) {
        let Some(running) = self.in_session(session_uri, |s, sh| s.error_turn(sh, chat, turn_id, message)) else {
            return self.end_turn_bookkeeping(session_uri, chat, false);
        };
        if self.in_session(session_uri, |s, sh| s.fail_creation(sh, message)).unwrap_or(false) {
            // The creation failed: its agent goes, and the next send starts
            // it afresh (Sessions page: "held with its start owed").
            self.let_agents_go(session_uri);
            self.after_chat_change(session_uri, chat);
            self.announce(session_uri);
            crate::mark!("creation_failed_start_owed");
            self.shared.log(LogLevel::Warn, "session.creation_failed", Some(session_uri.clone()), message.to_owned());
        }
        self.end_turn_bookkeeping(session_uri, chat, running);
    }

    /// After a turn ended (completed, cancelled, failed): clear its clock,
    /// note activity, mirror the chat, recount, and persist the record.
    /// What every turn's end does, in this order: the chat's bookkeeping,
    /// the record, then (`checkpoint`: a turn that completed or failed for
    /// good) its checkpoint, and only then the residency check, so the
    /// checkpoint is work in hand that keeps the session from being evicted
    /// under it (issue 18: an eviction at a turn's end left its checkpoint
    /// running on a session that had gone).
    pub(crate) fn end_turn_bookkeeping(&mut self, session_uri: &Uri, chat: &Uri, checkpoint: bool) {
        self.in_session(session_uri, |s, sh| s.turn_ended(sh, chat));
        self.recount_active();
        self.in_session(session_uri, |s, sh| s.is_announced().then(|| s.store_put(sh)));
        if checkpoint {
            self.checkpoint_turn(session_uri);
        }
    }

    /// Sends `session/ready` once the session's first turn went to its
    /// backend (or a retry after a failed creation succeeded).
    pub(crate) fn mark_ready(&mut self, session_uri: &Uri) {
        self.announce(session_uri);
        self.in_session(session_uri, |s, sh| s.ready(sh));
    }

}
