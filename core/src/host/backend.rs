//! A session's agents and turns as the host sequences them: what a
//! session's backend answers and says (a chat's agent started or not, a
//! turn taken, what an agent says unprompted: `Input::Backend` turn
//! actions, background work, files written, an exit), and a turn's life
//! (handed to its chat's agent after a wake, the chat's agent start or the
//! session's first git command; taken, which announces a provisional
//! session; ended, completed, cancelled or failed, and what every end
//! does).
//!
//! What only reads and writes the session is the session's own
//! (`session/starts.rs`, `session/agents.rs`, `session/turns.rs`); this
//! file sequences it with what reaches past the session (a wake, the count
//! of active sessions, the catalogue, checkpoints, awareness).

use ahp_types::actions::StateAction;
use ahp_types::Uri;

use super::{Host, Op};
use crate::effect::{BackendCmd, LogLevel, OpId};
use crate::input::{BackendEvent, Outcome};
use crate::session::starts::StartNext;
use crate::session::turns::{AgentActionRefusal, AgentTurnAction};

impl Host {
    /// A chat's agent started (or failed to): the session takes the answer
    /// ([`Session::start_answered`]), and the host does what reaches past it.
    pub(crate) fn on_started(&mut self, session_uri: &Uri, chat: &Uri, op: OpId, outcome: Outcome) {
        let Some(next) = self.in_session(session_uri, |s, sh| s.start_answered(sh, chat, op, outcome)) else { return };
        match next {
            StartNext::Nothing => {}
            StartNext::CreateRefused { conn, id, message, logged } => {
                self.forget_unborn(session_uri);
                self.shared.reply_error(conn, id, crate::protocol::error::error(crate::protocol::error::INTERNAL_ERROR, message));
                if let Some(backend_said) = logged {
                    crate::mark!("create_refused_backend_failed");
                    self.shared.log(LogLevel::Warn, "session.create_failed", Some(session_uri.clone()), backend_said);
                }
            }
            StartNext::WakeDone => self.finish_wake(session_uri),
            StartNext::ChatStarted => self.chat_start_answered(session_uri, chat, None),
            StartNext::ChatFailed(message) => {
                crate::mark!("chat_start_failed");
                self.chat_start_answered(session_uri, chat, Some(&message));
                self.shared.log(LogLevel::Warn, "chat.start_failed", Some(session_uri.clone()), message);
            }
        }
    }

    /// Removes a session whose creation was refused: it never existed.
    fn forget_unborn(&mut self, session_uri: &Uri) {
        if let Some(s) = self.drop_session(session_uri) {
            self.shared.retired.insert(session_uri.clone());
            for chat in &s.record.chats {
                self.shared.chats.remove(&chat.resource);
                self.shared.retired.insert(chat.resource.clone());
            }
            for c in self.shared.conns.values_mut() {
                c.subscriptions.remove(session_uri);
                for chat in &s.record.chats {
                    c.subscriptions.remove(&chat.resource);
                }
            }
        }
    }

    /// The backend acknowledged (or refused) a turn. The first turn a
    /// backend takes announces a provisional session: `root/sessionAdded`
    /// then `session/ready` (Sessions page, "The life of a session").
    pub(crate) fn on_sent(&mut self, session_uri: &Uri, op: OpId, outcome: Outcome) {
        let Some(session) = self.sessions.get_mut(session_uri) else { return };
        let Some((chat, turn_id)) = session.sends_in_flight.remove(&op) else { return };
        match outcome {
            Outcome::Failed { message } => self.fail_turn(session_uri, &chat, &turn_id, &message),
            _ => self.agent_took_turn(session_uri, &chat),
        }
    }

    pub(crate) fn on_backend_event(&mut self, chat: &Uri, event: BackendEvent) {
        let Some(session_uri) = self.shared.chats.get(chat).cloned() else {
            self.shared.stats.stale_events += 1;
            return;
        };
        let live = self.sessions.get(&session_uri).is_some_and(|s| s.phase.is_live() && s.resident.is_some());
        if !live {
            self.shared.stats.stale_events += 1;
            return;
        }
        match event {
            BackendEvent::Busy(busy) => {
                self.in_session(&session_uri, |s, sh| s.set_busy(sh, chat, busy));
            }
            BackendEvent::Exited { message } => {
                if let Some(turn_id) = self.sessions.get(&session_uri).and_then(|s| s.running_turn(chat)) {
                    self.fail_turn(&session_uri, chat, &turn_id, &format!("the agent exited: {message}"));
                }
                crate::mark!("agent_exited");
                let can_resume = self.sessions.get(&session_uri).is_some_and(|s| s.can_resume);
                if can_resume {
                    // The other chats' agents are closed below and the
                    // session sleeps, which it does with nothing running
                    // (Sessions page, "Sleep and wake"): their turns end too
                    // (one was left running on an asleep session: sim
                    // issue 18).
                    let others = self.sessions.get(&session_uri).map(|s| s.running_turns_except(chat)).unwrap_or_default();
                    for (other, turn_id) in others {
                        self.fail_turn(&session_uri, &other, &turn_id, &format!("the session's agent exited: {message}"));
                    }
                }
                self.shared.log(LogLevel::Warn, "backend.exited", Some(session_uri.clone()), message);
                if !self.sessions.get(&session_uri).is_some_and(|s| s.can_resume) {
                    // A backend that cannot resume never sleeps.
                    self.in_session(&session_uri, |s, sh| s.agent_exited_for_good(sh, chat));
                    return;
                }
                if self.in_session(&session_uri, |s, sh| s.asleep_after_exit(sh, chat)).unwrap_or(false) {
                    self.archived_trees_go(&session_uri);
                }
            }
            BackendEvent::Wrote { paths } => {
                if let Some(s) = self.sessions.get_mut(&session_uri) {
                    s.count_chat_writes(&mut self.shared, chat, &paths);
                }
                self.on_wrote(&session_uri, paths);
            }
            BackendEvent::Action(action) => self.on_agent_action(&session_uri, chat, action),
        }
    }

    /// A chat action from the agent: it must name the running turn and be of
    /// a kind only a server sends; durations are the host's own.
    fn on_agent_action(&mut self, session_uri: &Uri, chat: &Uri, mut action: StateAction) {
        let now = self.shared.now.mono;
        let Some(checked) = self.sessions.get(session_uri).map(|s| s.check_agent_action(chat, &mut action, now)) else { return };
        let AgentTurnAction { turn_id, ends_turn, for_good } = match checked {
            Ok(checked) => checked,
            Err(refusal) => {
                self.shared.stats.stale_events += 1;
                if refusal == AgentActionRefusal::ClientsOnly {
                    self.shared.log(LogLevel::Warn, "backend.action_refused", Some(session_uri.clone()), "an agent sent an action only a client may send".to_owned());
                }
                return;
            }
        };
        // A tool call declaring the paths it writes waits for the host's
        // word (workspace awareness, `host/awareness.rs`).
        let confirm = match &mut action {
            StateAction::ChatToolCallReady(a) => self.vet_declared_write(session_uri, a).then(|| a.tool_call_id.clone()),
            _ => None,
        };
        if !self.emit(chat, action, None) {
            return;
        }
        self.agent_took_turn(session_uri, chat);
        if let Some(tool_call_id) = confirm {
            let provider = self.sessions.get(session_uri).map(|s| s.record.provider.clone()).unwrap_or_default();
            self.backend(Op::Fire, provider, chat.clone(), BackendCmd::ConfirmTool { turn_id: turn_id.clone(), tool_call_id, approved: true });
        }
        self.mark_activity(session_uri);
        if ends_turn {
            self.kept_turn_ended(session_uri, chat, &turn_id, None);
            self.end_turn_bookkeeping(session_uri, chat, for_good);
        } else {
            self.after_chat_change(session_uri, chat);
        }
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
        let live = self.sessions.get(session_uri).is_some_and(|s| s.phase.is_live() && !s.start_owed);
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
