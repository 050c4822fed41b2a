//! A session's one entry for what its agents say (issue 47: "an owner per
//! channel"): [`Session::handle`] takes one [`SessionInput`] and does all of
//! the session's own part of it in one pass (check, vet, apply, mirror,
//! announce, ready, the turn's end in the session), and returns in a
//! [`SessionOut`] only what reaches past the session, for the host to apply
//! (`Host::apply_session_out`).

use ahp_types::actions::StateAction;
use ahp_types::Uri;

use crate::awareness::{PeerSet, WriteVet};
use crate::effect::{BackendCmd, LogLevel};
use crate::session::table::Place;
use crate::session::turns::{AgentActionRefusal, AgentTurnAction};
use crate::session::Session;
use crate::shared::{Op, Shared};

/// Who ended a turn, for its end's record write (`Host::after_turn_end`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TurnEnder {
    /// The chat's agent (`chat/turnComplete` or its own `chat/error`): its
    /// history holds the turn.
    Agent,
    /// The host: a client's cancel, a failed send, an agent gone.
    Host,
}

/// One input for a session's own rules ([`Session::handle`]).
#[derive(Debug)]
pub(crate) enum SessionInput<'a> {
    /// An action `chat`'s agent sent (`BackendEvent::Action`), with the
    /// session's live peers (workspace awareness) to vet a declared write
    /// against.
    AgentAction {
        /// The chat whose agent sent it.
        chat: &'a Uri,
        /// The action, checked ([`Session::check_agent_action`]: a change
        /// to nothing is not a change, so a refused one never makes the
        /// session one the input changed).
        action: StateAction,
        /// What the check found: the running turn it belongs to.
        turn: AgentTurnAction,
        /// The session's live peers, if awareness found any.
        peers: Option<&'a PeerSet>,
    },
    /// `chat`'s agent has background work, or no longer has
    /// (`BackendEvent::Busy`; `Session.busy()`).
    Busy {
        /// The chat whose agent said so.
        chat: &'a Uri,
        /// Whether it has background work now.
        busy: bool,
    },
    /// `chat`'s agent took steering message `id` into running turn
    /// `turn_id` (`BackendEvent::SteeringTaken`).
    SteeringTaken {
        /// The chat.
        chat: &'a Uri,
        /// The turn the agent names.
        turn_id: &'a str,
        /// The steering message's id.
        id: &'a str,
    },
}

/// A turn's end as the session hands it to the host: the session has done
/// its part (the kept turn let go, the clock stopped, the chat mirrored);
/// the host tells the lifecycle's parts and writes the record
/// (`Host::after_turn_end`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TurnEnd {
    /// The chat whose turn ended.
    pub chat: Uri,
    /// Whether the turn earned a checkpoint (it ended for good).
    pub checkpoint: bool,
    /// Who ended it.
    pub ender: TurnEnder,
}

/// What one input to a session asks of the host beyond the session
/// ([`Session::handle`]); empty for most inputs (a streamed delta).
#[derive(Debug, Default, PartialEq, Eq)]
#[must_use]
pub(crate) struct SessionOut {
    /// A turn ended.
    pub turn_ended: Option<TurnEnd>,
}

impl Session {
    /// Applies one input to the session, at its `place` in the host's table
    /// (so it can announce itself), and returns what the host must do
    /// beyond it.
    pub(crate) fn handle(&mut self, sh: &mut Shared, place: &Place, input: SessionInput<'_>) -> SessionOut {
        match input {
            SessionInput::AgentAction { chat, action, turn, peers } => self.on_agent_action(sh, place, chat, action, turn, peers),
            SessionInput::Busy { chat, busy } => {
                self.set_busy(sh, chat, busy);
                SessionOut::default()
            }
            SessionInput::SteeringTaken { chat, turn_id, id } => {
                if self.steering_taken(sh, chat, turn_id, id) {
                    self.summary_changed(sh);
                }
                SessionOut::default()
            }
        }
    }

    /// A chat action from the agent, checked: it names the running turn and
    /// is of a kind only a server sends ([`Session::check_agent_action`];
    /// durations are the host's own). A tool call declaring the paths it
    /// writes is vetted against the session's peers first and confirmed by
    /// the host when nothing stands in its way
    /// ([`crate::awareness::vet_declared_write`]). Applied, it shows the
    /// agent took the turn ([`Session::took_turn`]); a turn's end is the
    /// session's, then the host's ([`SessionOut::turn_ended`]).
    fn on_agent_action(&mut self, sh: &mut Shared, place: &Place, chat: &Uri, mut action: StateAction, turn: AgentTurnAction, peers: Option<&PeerSet>) -> SessionOut {
        let AgentTurnAction { turn_id, ends_turn, for_good } = turn;
        let confirm = match &mut action {
            StateAction::ChatToolCallReady(a) => {
                let base = self.record.working_directories.first().map(|d| d.as_str());
                let vet = crate::awareness::vet_declared_write(sh.config.awareness.enabled, peers, &self.record.config, base, a);
                self.log_vet(sh, &vet);
                vet.confirms().then(|| a.tool_call_id.clone())
            }
            _ => None,
        };
        if !self.emit(sh, chat, action, None) {
            return SessionOut::default();
        }
        self.took_turn(sh, place, chat);
        if let Some(tool_call_id) = confirm {
            self.backend(sh, Op::Fire, chat.clone(), BackendCmd::ConfirmTool { turn_id: turn_id.clone(), tool_call_id, approved: true });
        }
        self.mark_activity(sh);
        if !ends_turn {
            self.after_chat_change(sh, chat);
            return SessionOut::default();
        }
        self.end_kept_turn(chat, &turn_id, None);
        self.turn_ended(sh, chat);
        SessionOut { turn_ended: Some(TurnEnd { chat: chat.clone(), checkpoint: for_good, ender: TurnEnder::Agent }) }
    }

    /// An agent's action the check refused
    /// ([`Session::check_agent_action`]): counted stale; one only a client
    /// may send is logged.
    pub(crate) fn refuse_agent_action(&self, sh: &mut Shared, refusal: AgentActionRefusal) {
        sh.stats.stale_events += 1;
        if refusal == AgentActionRefusal::ClientsOnly {
            sh.log(LogLevel::Warn, "backend.action_refused", Some(self.record.resource.clone()), "an agent sent an action only a client may send".to_owned());
        }
    }

    /// Logs a vet that found a conflict (workspace awareness).
    fn log_vet(&self, sh: &mut Shared, vet: &WriteVet) {
        let uri = Some(self.record.resource.clone());
        match vet {
            WriteVet::NotAsked | WriteVet::Clear => {}
            WriteVet::Held(message) => {
                crate::mark!("awareness_write_held");
                sh.log(LogLevel::Warn, "awareness.write_held", uri, message.clone());
            }
            WriteVet::AutoApproved(message) => sh.log(LogLevel::Warn, "awareness.write_conflict", uri, format!("auto-approved: {message}")),
            WriteVet::Warned(message) => sh.log(LogLevel::Warn, "awareness.write_conflict", uri, message.clone()),
        }
    }

    /// The agent took a turn of `chat` (its send was acknowledged, or the
    /// agent spoke in it, whichever is heard first: a late answer is stale
    /// after a sleep). Its conversation exists, so a wake resumes it rather
    /// than starting it afresh (issue 19, seeds 326 and 1631: a wake after
    /// a lost answer started the conversation again and the turns it had
    /// taken were gone); a steering message set while the turn waited to be
    /// sent goes to it; a provisional session is announced, then ready.
    pub(crate) fn took_turn(&mut self, sh: &mut Shared, place: &Place, chat: &Uri) {
        self.conversation_exists(chat);
        self.hand_steering(sh, chat);
        self.announce(sh, place);
        self.ready(sh);
    }
}
