//! What a session's own rules say and ask, through what they share with
//! the host ([`Shared`]): an action applied to its state with the
//! protocol's reducer and fanned out under the next `serverSeq`, its record
//! written, a command to a chat's agent, its LRU stamp and idle clock, its
//! `modifiedAt` moved with its catalogue row. Nothing here reaches another
//! session.

use ahp::reducers::{apply_action_to_chat, apply_action_to_session, ReduceOutcome};
use ahp_types::actions::{ActionOrigin, StateAction};
use ahp_types::Uri;

use crate::effect::{BackendCmd, Durability, Effect, LogLevel, OpId, StoreCmd};
use crate::shared::{Op, Shared};
use crate::session::{Phase, Session};
use crate::time::WallTime;

impl Session {
    /// Applies an accepted action to this session's state on `channel`
    /// (the session's channel or one of its chats') with the protocol's own
    /// reducer, then stamps, keeps and sends it ([`Shared::fan_out`]). An
    /// action that ends a chat's running turn is preceded by the host's
    /// cancel of each question still open in it
    /// ([`Session::close_questions`]).
    /// Returns false (and sends nothing) when the reducer finds the action
    /// invalid or out of its channel's scope. With no state held, the
    /// action is sent as it is.
    pub(crate) fn emit(&mut self, sh: &mut Shared, channel: &Uri, action: StateAction, origin: Option<ActionOrigin>) -> bool {
        // A turn's end cancels the questions still open in it first
        // (`session/questions.rs`).
        if *channel != self.record.resource {
            self.close_questions(sh, channel, &action);
        }
        let outcome = match self.resident.as_mut() {
            Some(r) if *channel == self.record.resource => Some(apply_action_to_session(&mut r.session, &action)),
            Some(r) => r.chats.get_mut(channel).map(|chat| apply_action_to_chat(chat, &action)),
            // A chat moved in while the state was not held keeps its state
            // until the next wake (`Work::moved_in`): what its watchers are
            // told moves it too.
            None if self.work.moved_in.contains_key(channel) => self.work.moved_in.get_mut(channel).map(|chat| apply_action_to_chat(chat, &action)),
            None => None,
        };
        match outcome {
            Some(ReduceOutcome::Invalid(e)) => {
                sh.log(LogLevel::Warn, "action.invalid", Some(self.record.resource.clone()), format!("not applied: {e}"));
                false
            }
            Some(ReduceOutcome::OutOfScope) => {
                sh.log(LogLevel::Warn, "action.out_of_scope", Some(self.record.resource.clone()), "action does not belong to its channel".to_owned());
                false
            }
            _ => {
                sh.fan_out(channel, action, origin);
                true
            }
        }
    }

    /// Writes this session's record (`Effect::Store` put, durable before it
    /// is answered), unless its tombstone is written or on its way (a
    /// record written after it would bring the session back without the
    /// conversations the dispose deletes: issue 19, sim seed 17), or a
    /// parked write is in flight (the write is owed until it settles: see
    /// [`crate::session::Work::put_owed`]).
    pub(crate) fn store_put(&mut self, sh: &mut Shared) -> Option<OpId> {
        self.store_put_with(sh, Durability::Now)
    }

    /// [`Session::store_put`] with the write's [`Durability`]. An owed
    /// write goes out later as [`Durability::Now`]: it may carry what
    /// other changes waited for.
    pub(crate) fn store_put_with(&mut self, sh: &mut Shared, durability: Durability) -> Option<OpId> {
        if matches!(self.phase, Phase::Disposing(_)) {
            return None;
        }
        if self.work.parked.is_some() {
            self.work.put_owed = true;
            return None;
        }
        let record = Box::new(self.record.clone());
        let op = sh.new_op(Op::StorePut { session: self.record.resource.clone() });
        sh.effects.push(Effect::Store { op, command: StoreCmd::Put { record, durability } });
        // A durable write carries the conversations named since the last:
        // their chats' turns wait for its answer (`Session::hand_to_agent`).
        // A `WithNext` write is answered before it is durable: it saves
        // nothing a turn may wait for.
        if durability == Durability::Now && !self.work().conversations_unsaved.is_empty() {
            let named = std::mem::take(&mut self.work.conversations_unsaved);
            self.work.conversation_writes.insert(op, named);
        }
        Some(op)
    }

    /// Sends `command` to `chat`'s agent for `op` (`Effect::Backend`);
    /// a start is noted among the starts not answered yet
    /// ([`crate::session::Work::starts_unanswered`]). Returns the op id.
    pub(crate) fn backend(&mut self, sh: &mut Shared, op: Op, chat: Uri, command: BackendCmd) -> OpId {
        let start = matches!(op, Op::Start { .. });
        let id = sh.new_op(op);
        if start {
            self.work.starts_unanswered.insert(id, chat.clone());
        }
        sh.effects.push(Effect::Backend { op: id, provider: self.record.provider.to_string(), chat, command });
        id
    }

    /// Marks the session used now (LRU, Sessions page "Sleep and wake": "a
    /// session is used when it starts, when a client subscribes to it, and
    /// when a turn starts in it").
    pub(crate) fn touch(&mut self, sh: &mut Shared) {
        sh.lru_clock += 1;
        self.last_used = sh.lru_clock;
    }

    /// Notes that an action moved in the session now (its idle clock).
    pub(crate) fn mark_activity(&mut self, sh: &Shared) {
        self.last_activity = sh.now.mono;
    }

    /// Moves `modifiedAt` forward to `to` (never back: "modifiedAt ...
    /// moves forward only") and the session's catalogue row with it, once
    /// it is announced (a provisional session has no row).
    pub(crate) fn advance_modified(&mut self, sh: &mut Shared, to: WallTime) {
        let was = self.advance_modified_at(to);
        if self.is_announced() {
            sh.catalogue.moved(was.0, self.modified_at.0, &self.record.resource);
        }
    }
}
