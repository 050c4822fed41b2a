//! A session's chats' agents as the session sees them: closing them all
//! (a sleep, an eviction, a restart in another root), an agent that went
//! away for good in a session whose backend cannot resume (Sessions page,
//! "Sleep and wake": such a session never sleeps), and handing a turn to
//! its chat's agent.
//!
//! An agent that went away for good is owed a fresh start: the session
//! stays live with its state held, and the chat's agent is started afresh
//! (a new conversation, `resume: false`) just before the chat's next send.
//! The backend takes a chat's commands in issue order, so the send reaches
//! the new agent.

use ahp_types::state::Message;
use ahp_types::Uri;

use crate::effect::{BackendCmd, OpId};
use crate::shared::{Op, Shared};
use crate::session::{Phase, Session};

impl Session {
    /// Closes every chat's agent of a live session and forgets what was in
    /// flight with them; false (nothing done) when it is not live.
    pub(crate) fn close_agents(&mut self, sh: &mut Shared) -> bool {
        if !self.phase.is_live() {
            return false;
        }
        let chats: Vec<Uri> = self.record.chats.iter().map(|c| c.resource.clone()).collect();
        for chat in chats {
            self.backend(sh, Op::Fire, chat, BackendCmd::Close);
        }
        // A session sleeps with nothing running: sends not yet acknowledged
        // (a failed creation lets its agents go with an earlier send's
        // answer still out) and background work went with the agents.
        self.work.sends_in_flight.clear();
        self.work.busy_chats.clear();
        self.work.agents_owed.clear();
        true
    }

    /// `chat`'s agent exited on its own and the session's backend cannot
    /// resume: the session stays live, what the agent had in hand for the
    /// chat is dropped, and its start is owed to the chat's next send.
    /// (Ending the turn may already have let the agents go, for a session
    /// whose creation failed; then the owed start is the session's own.)
    pub(crate) fn agent_exited_for_good(&mut self, sh: &mut Shared, chat: &Uri) {
        if !self.phase.is_live() {
            return;
        }
        self.work.sends_in_flight.retain(|_, (c, _)| c != chat);
        self.work.busy_chats.remove(chat);
        self.work.agents_owed.insert(chat.clone());
        self.mark_activity(sh);
    }

    /// Before a send to `chat` of a live session: starts its agent afresh
    /// if it is owed (see [`Session::agent_exited_for_good`]); the answer
    /// records the new conversation id on the chat.
    fn start_owed_agent(&mut self, sh: &mut Shared, chat: &Uri) {
        if !self.work.agents_owed.remove(chat) {
            return;
        }
        let Some(conversation_id) = self.record.chats.iter().find(|c| c.resource == *chat).map(|c| c.conversation_id.to_string()) else {
            return;
        };
        let session = self.record.resource.clone();
        let working_directory = self.record.working_directories.first().cloned();
        let peer_directories = sh.peers_for(&self.record);
        let op = self.backend(
            sh,
            Op::Start { session: session.clone(), chat: chat.clone() },
            chat.clone(),
            BackendCmd::Start { session, conversation_id, working_directory, peer_directories, resume: false },
        );
        if let Some(ops) = self.phase.awaited_mut() {
            ops.insert(op);
        }
    }

    /// A turn started in the session (`chat/turnStarted`, from a client or
    /// the queue): a live session sends it on ([`Session::send_live`]); one
    /// asleep, or whose start is owed, holds it and is woken by the host
    /// ([`TurnSend::NeedsWake`]).
    pub(crate) fn start_turn(&mut self, sh: &mut Shared, chat: Uri, turn_id: String, message: std::sync::Arc<Message>) -> TurnSend {
        if !self.phase.is_live() || self.start_owed {
            self.work.pending_sends.push((chat, turn_id, message));
            return TurnSend::NeedsWake;
        }
        self.send_live(sh, chat, turn_id, message)
    }

    /// A turn of a live session goes to its agent, unless the session's
    /// first send (or its first after a move) must ask git first
    /// ([`Session::hold_for_git`]): then it is held, or failed when no tree
    /// can be named.
    pub(crate) fn send_live(&mut self, sh: &mut Shared, chat: Uri, turn_id: String, message: std::sync::Arc<Message>) -> TurnSend {
        match self.hold_for_git(sh, &chat, &turn_id, &message) {
            super::git::GitHold::Held => TurnSend::Held,
            super::git::GitHold::Failed { pending, reason } => TurnSend::Failed { pending, reason },
            super::git::GitHold::NotNeeded => {
                self.hand_to_agent(sh, chat, turn_id, message);
                TurnSend::Sent
            }
        }
    }

    /// Sends a turn of a live session to its chat's agent (starting an
    /// agent it owes first). A chat whose agent is still starting holds
    /// the turn until the start answers (`Host::chat_start_answered`):
    /// the answer names the conversation the turn is kept under, and a
    /// turn the backend ended under a conversation the record never
    /// learnt was gone after a restart (issue 19, seed 12609).
    pub(crate) fn hand_to_agent(&mut self, sh: &mut Shared, chat: Uri, turn_id: String, message: std::sync::Arc<Message>) {
        self.start_owed_agent(sh, &chat);
        let starting = self.phase.awaited().is_some_and(|ops| ops.iter().any(|op| sh.starts_chat(op, &chat)));
        if starting {
            crate::mark!("send_waits_for_chat_start");
            self.work.pending_sends.push((chat, turn_id, message));
            return;
        }
        // The conversation the start named must be durable before the
        // agent writes a turn into it: the turn's end is written
        // `Durability::WithNext` (docs/DECISIONS.md, 32), and a restart
        // that read an older record would resume another conversation, or
        // start this one afresh over the agent's history, and show the
        // turn interrupted (sim seeds 3406 and 28889; DECISIONS 8).
        if self.conversation_unsaved(&chat) {
            crate::mark!("send_waits_for_conversation_saved");
            if self.work().conversations_unsaved.contains(&chat) {
                self.store_put(sh);
            }
            self.work.pending_sends.push((chat, turn_id, message));
            return;
        }
        // The files it attaches are read by the backend, within this
        // session's folders (`files::attachments`, issue 48).
        let attachments = crate::files::attachments::reads_for(&message, &self.record);
        let op = self.backend(sh, Op::Send { session: self.record.resource.clone() }, chat.clone(), BackendCmd::Send { turn_id: turn_id.clone(), message, attachments });
        self.work.sends_in_flight.insert(op, (chat, turn_id));
    }

    /// Whether the conversation a start named for `chat` is not durable
    /// yet: not written, or its write not answered.
    fn conversation_unsaved(&self, chat: &Uri) -> bool {
        let work = self.work();
        work.conversations_unsaved.contains(chat) || work.conversation_writes.values().any(|named| named.contains(chat))
    }

    /// The store answered write `op`; `failed` when it refused it. A write
    /// that carried conversations a start named makes them durable, and
    /// the turns held for them go to their agents; refused, the names are
    /// unsaved again and those turns fail with the store's words, as a
    /// client's action the store refused is not applied. Turns held for
    /// something else too (a chat's start, the session's git work) stay
    /// held; in a session that fell asleep meanwhile (its creation failed,
    /// an agent exited) they wait for a wake the host starts, which hands
    /// them over (asking for the name's write again).
    pub(crate) fn conversation_written(&mut self, sh: &mut Shared, op: OpId, failed: bool) -> NamesWritten {
        let Some(named) = self.work.conversation_writes.remove(&op) else { return NamesWritten::default() };
        // A later write in flight carries the same names: its answer decides.
        let named: Vec<Uri> = named.into_iter().filter(|chat| !self.conversation_unsaved(chat)).collect();
        if failed {
            self.work.conversations_unsaved.extend(named.iter().cloned());
        }
        let held = |s: &Session, chats: &[Uri]| s.work().pending_sends.iter().any(|(c, _, _)| chats.contains(c));
        if self.phase == Phase::Asleep {
            return NamesWritten { fail: Vec::new(), wake: held(self, &named) };
        }
        // Held for nothing else: the session is live with its start and
        // git work done, and the chat's agent is not starting.
        let may_send = self.phase.is_live() && !self.start_owed && self.work().git_begin.is_none();
        let ready: Vec<Uri> = named.into_iter().filter(|chat| may_send && !self.phase.awaited().is_some_and(|ops| ops.iter().any(|op| sh.starts_chat(op, chat)))).collect();
        if failed {
            let fail = self.work().pending_sends.iter().filter(|(c, _, _)| ready.contains(c)).map(|(c, t, _)| (c.clone(), t.clone())).collect();
            return NamesWritten { fail, wake: false };
        }
        let (due, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.work.pending_sends).into_iter().partition(|(c, _, _)| ready.contains(c));
        self.work.pending_sends = rest;
        for (chat, turn_id, message) in due {
            self.hand_to_agent(sh, chat, turn_id, message);
        }
        NamesWritten::default()
    }

    /// `chat`'s agent reported background work (an ACP terminal still
    /// running) or its end: a session with some does not sleep (Sessions
    /// page, "Sleep and wake"). Either is activity.
    pub(crate) fn set_busy(&mut self, sh: &mut Shared, chat: &Uri, busy: bool) {
        if busy {
            self.work.busy_chats.insert(chat.clone());
        } else {
            self.work.busy_chats.remove(chat);
        }
        self.mark_activity(sh);
    }

    /// After `chat`'s agent exited in a session whose backend can resume:
    /// the conversation is the backend's, the other chats' agents are
    /// closed, and the session is asleep until something needs it. Returns
    /// true when it went to sleep now (ending the turn may already have let
    /// the agents go: a failed creation, or an eviction once the turn
    /// ended).
    pub(crate) fn asleep_after_exit(&mut self, sh: &mut Shared, chat: &Uri) -> bool {
        let others: Vec<Uri> = self.record.chats.iter().map(|c| c.resource.clone()).filter(|c| c != chat).collect();
        for other in others {
            self.backend(sh, Op::Fire, other, BackendCmd::Close);
        }
        self.work.busy_chats.clear();
        self.work.sends_in_flight.clear();
        if !self.phase.is_live() {
            return false;
        }
        self.set_phase(Phase::Asleep);
        true
    }

    /// The id of `chat`'s running turn, if one runs.
    pub fn running_turn(&self, chat: &Uri) -> Option<String> {
        self.resident.as_ref()?.chats.get(chat)?.active_turn.as_ref().map(|t| t.id.clone())
    }

    /// Every chat's running turn: (chat, turn id), in chat order.
    pub fn running_turns(&self) -> Vec<(Uri, String)> {
        let Some(resident) = self.resident.as_ref() else { return Vec::new() };
        resident.chats.iter().filter_map(|(c, st)| st.active_turn.as_ref().map(|t| (c.clone(), t.id.clone()))).collect()
    }

    /// Every chat's running turn but `chat`'s, in chat order.
    pub fn running_turns_except(&self, chat: &Uri) -> Vec<(Uri, String)> {
        self.running_turns().into_iter().filter(|(c, _)| c != chat).collect()
    }

    /// The turns held for the session's first git command go to their
    /// agents, once it is live with no start owed. Returns true when it is
    /// asleep meanwhile (its agent exited): the host wakes it, and the wake
    /// hands them over.
    pub(crate) fn release_held_sends(&mut self, sh: &mut Shared) -> bool {
        if !self.phase.is_live() || self.start_owed {
            return self.phase == Phase::Asleep;
        }
        for (chat, turn_id, message) in std::mem::take(&mut self.work.pending_sends) {
            self.hand_to_agent(sh, chat, turn_id, message);
        }
        false
    }

    /// Lets every chat's agent go and puts a live session to sleep; its
    /// state stays held. False, with nothing done, when it is not live.
    pub(crate) fn let_agents_go(&mut self, sh: &mut Shared) -> bool {
        if !self.close_agents(sh) {
            return false;
        }
        self.set_phase(Phase::Asleep);
        true
    }
}

/// What the host does once a write that carried conversations' names is
/// answered ([`Session::conversation_written`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NamesWritten {
    /// Turns held for a name the store refused, to fail with its words:
    /// (chat, turn id).
    pub fail: Vec<(Uri, String)>,
    /// The session fell asleep with turns held for the names: the host
    /// wakes it, and the wake hands them over.
    pub wake: bool,
}

/// What became of a turn the session was handed ([`Session::start_turn`],
/// [`Session::send_live`]).
#[derive(Debug, Clone, PartialEq)]
pub enum TurnSend {
    /// It went to its chat's agent (or waits for that agent's start).
    Sent,
    /// It waits for the session's git work (its tree and `turn/0`).
    Held,
    /// It is held until the session wakes: the host wakes it.
    NeedsWake,
    /// No tree can be named: these held turns fail with `reason`.
    Failed {
        /// The turns held: (chat, turn id, message).
        pending: Vec<crate::session::in_hand::HeldSend>,
        /// What the client reads.
        reason: String,
    },
}
