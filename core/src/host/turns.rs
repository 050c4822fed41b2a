//! The life of a turn in the host: handed to its chat's agent (after a
//! wake, the chat's agent start, or the session's first git command), taken
//! by the agent (which announces a provisional session), ended (completed,
//! cancelled or failed), and what every end does.
//!
//! A chat's agent that went away in a session whose backend cannot resume
//! (Sessions page, "Sleep and wake": such a session never sleeps) is owed a
//! fresh start: the session stays live with its state held, and the chat's
//! agent is started afresh (a new conversation, `resume: false`) just
//! before the chat's next send. The backend takes a chat's commands in
//! issue order, so the send reaches the new agent.

use ahp_types::actions::{ChatErrorAction, SessionCreationFailedAction, StateAction};
use ahp_types::state::{ErrorInfo, ErrorResponsePart, SessionLifecycle};
use ahp_types::Uri;

use super::{Host, Op};
use crate::effect::{BackendCmd, LogLevel};
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
            self.hand_to_agent(session_uri, chat, turn_id, message);
            return;
        }
        let Some(session) = self.sessions.get_mut(session_uri) else { return };
        session.pending_sends.push((chat, turn_id, message));
        self.wake(session_uri);
    }

    /// Sends a turn of a live session to its chat's agent (starting an
    /// agent it owes first). A chat whose agent is still starting holds
    /// the turn until the start answers ([`Host::chat_start_answered`]):
    /// the answer names the conversation the turn is kept under, and a
    /// turn the backend ended under a conversation the record never
    /// learnt was gone after a restart (issue 19, seed 12609).
    pub(crate) fn hand_to_agent(&mut self, session_uri: &Uri, chat: Uri, turn_id: String, message: ahp_types::state::Message) {
        self.start_owed_agent(session_uri, &chat);
        let Some(session) = self.sessions.get(session_uri) else { return };
        let provider = session.record.provider.clone();
        let starting = session.phase_ops.iter().any(|op| Host::starts_chat(&self.shared.ops, op, &chat));
        if starting {
            crate::mark!("send_waits_for_chat_start");
            if let Some(session) = self.sessions.get_mut(session_uri) {
                session.pending_sends.push((chat, turn_id, message));
            }
            return;
        }
        let op = self.backend(Op::Send { session: session_uri.clone() }, provider, chat.clone(), BackendCmd::Send { turn_id: turn_id.clone(), message });
        if let Some(session) = self.sessions.get_mut(session_uri) {
            session.sends_in_flight.insert(op, (chat, turn_id));
        }
    }

    /// The agent of `chat` in a live session answered its start: the turns
    /// it held go to it, or fail with the start's `failure`. Turns still
    /// waiting for the session's first git command stay for it.
    pub(crate) fn chat_start_answered(&mut self, session_uri: &Uri, chat: &Uri, failure: Option<&str>) {
        let Some(session) = self.sessions.get_mut(session_uri) else { return };
        if session.git_begin.is_some() {
            return;
        }
        let (held, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut session.pending_sends).into_iter().partition(|(c, _, _)| c == chat);
        session.pending_sends = rest;
        for (chat, turn_id, message) in held {
            match failure {
                Some(message) => self.fail_turn(session_uri, &chat, &turn_id, &format!("the chat's agent would not start: {message}")),
                None => self.hand_to_agent(session_uri, chat, turn_id, message),
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
        if let Some(c) = self.sessions.get_mut(session_uri).and_then(|s| s.record.chats.iter_mut().find(|c| c.resource == *chat)) {
            c.fresh = false;
        }
        self.mark_ready(session_uri);
    }

    /// Ends a running turn with `chat/error` carrying `message`. For a
    /// session still provisional this also fails its creation:
    /// `session/creationFailed` after the turn's error, then
    /// `root/sessionAdded`, and its start is owed to the next send.
    pub(crate) fn fail_turn(&mut self, session_uri: &Uri, chat: &Uri, turn_id: &str, message: &str) {
        // A failed turn still held for its agent is not handed over later.
        if let Some(s) = self.sessions.get_mut(session_uri) {
            s.pending_sends.retain(|(c, t, _)| !(c == chat && t == turn_id));
        }
        let running = self
            .sessions
            .get(session_uri)
            .and_then(|s| s.resident.as_ref())
            .and_then(|r| r.chats.get(chat))
            .and_then(|c| c.active_turn.as_ref())
            .is_some_and(|t| t.id == turn_id);
        if running {
            let duration = self.turn_duration(session_uri, chat);
            let action = StateAction::ChatError(ChatErrorAction {
                turn_id: turn_id.to_owned(),
                duration,
                part: ErrorResponsePart {
                    error: ErrorInfo { error_type: "backendError".to_owned(), message: message.to_owned(), stack: None, meta: None },
                    resumable: Some(false),
                },
                meta: None,
            });
            self.emit(chat, action, None);
            self.kept_turn_ended(session_uri, chat, turn_id, Some(crate::kept_turns::KeptEnd::Error(message.to_owned())));
        }
        let provisional = self.sessions.get(session_uri).is_some_and(|s| !s.is_announced());
        if provisional {
            let action = StateAction::SessionCreationFailed(SessionCreationFailedAction {
                error: ErrorInfo { error_type: "creationFailed".to_owned(), message: message.to_owned(), stack: None, meta: None },
            });
            self.emit(session_uri, action, None);
            if let Some(s) = self.sessions.get_mut(session_uri) {
                s.start_owed = true;
            }
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
        if let Some(resident) = self.sessions.get_mut(session_uri).and_then(|s| s.resident.as_mut()) {
            resident.turn_started_mono.remove(chat);
        }
        self.mark_activity(session_uri);
        self.after_chat_change(session_uri, chat);
        self.recount_active();
        if self.sessions.get(session_uri).is_some_and(|s| s.is_announced()) {
            self.store_put(session_uri);
        }
        if checkpoint {
            self.checkpoint_turn(session_uri);
        }
    }

    /// Sends `session/ready` once the session's first turn went to its
    /// backend (or a retry after a failed creation succeeded).
    pub(crate) fn mark_ready(&mut self, session_uri: &Uri) {
        let lifecycle = self
            .sessions
            .get(session_uri)
            .and_then(|s| s.resident.as_ref())
            .map(|r| r.session.lifecycle.clone());
        self.announce(session_uri);
        if let Some(l) = lifecycle {
            if l != SessionLifecycle::Ready {
                self.emit(session_uri, StateAction::SessionReady(ahp_types::actions::SessionReadyAction {}), None);
                crate::mark!("session_ready_after_announce");
                self.shared.log(LogLevel::Info, "session.ready", Some(session_uri.clone()), String::new());
            }
        }
        if let Some(s) = self.sessions.get_mut(session_uri) {
            s.start_owed = false;
        }
    }

    /// `chat`'s agent exited on its own and the session's backend cannot
    /// resume: the session stays live, what the agent had in hand for the
    /// chat is dropped, and its start is owed to the chat's next send.
    /// (Ending the turn may already have let the agents go, for a session
    /// whose creation failed; then the owed start is the session's own.)
    pub(crate) fn agent_exited_for_good(&mut self, session_uri: &Uri, chat: &Uri) {
        let Some(s) = self.sessions.get_mut(session_uri) else { return };
        if s.phase != Phase::Live {
            return;
        }
        s.sends_in_flight.retain(|_, (c, _)| c != chat);
        s.busy_chats.remove(chat);
        s.agents_owed.insert(chat.clone());
        self.mark_activity(session_uri);
    }

    /// Before a send to `chat` of a live session: starts its agent afresh
    /// if it is owed (see [`Host::agent_exited_for_good`]); the answer
    /// records the new conversation id on the chat.
    pub(crate) fn start_owed_agent(&mut self, session_uri: &Uri, chat: &Uri) {
        let Some(s) = self.sessions.get_mut(session_uri) else { return };
        if !s.agents_owed.remove(chat) {
            return;
        }
        let provider = s.record.provider.clone();
        let Some(conversation_id) = s.record.chats.iter().find(|c| c.resource == *chat).map(|c| c.conversation_id.clone()) else {
            return;
        };
        let working_directory = s.record.working_directories.first().cloned();
        let peer_directories = self.sessions.get(session_uri).map(|s| self.peers_for(s)).unwrap_or_default();
        let op = self.backend(
            Op::Start { session: session_uri.clone(), chat: chat.clone() },
            provider,
            chat.clone(),
            BackendCmd::Start { session: session_uri.clone(), conversation_id, working_directory, peer_directories, resume: false },
        );
        if let Some(s) = self.sessions.get_mut(session_uri) {
            s.phase_ops.insert(op);
        }
    }
}
