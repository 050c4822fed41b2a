//! A steering message handed to the running turn (issue 23, "Steering
//! messages": "handed to the running turn at the backend's next safe point
//! where the backend can take it, else held and sent as the next turn; the
//! host removes it when consumed"; ahp-types: "Steering messages are
//! injected into the current turn mid-flight").
//!
//! The message itself is the host's durable data like a queued one
//! (`session/pending.rs`): set, replaced and removed by clients through the
//! record. Where the chat's agent steers (`AgentSpec::steers`: the echo
//! agent) and its agent has the running turn, the host hands it over with
//! `BackendCmd::Steer` each time the message is set, and again when the
//! agent takes a turn the message waited for. The agent says when it took
//! one at a safe point (`BackendEvent::SteeringTaken`); only then does the
//! host take it off the record and say `chat/pendingMessageRemoved` (no
//! origin). A turn that ends before taking it leaves it held, and it runs as
//! the chat's next turn ([`Session::park_queued_start`]), as on an agent
//! that does not steer. docs/DECISIONS.md, 18.

use ahp_types::actions::{ChatPendingMessageRemovedAction, StateAction};
use ahp_types::state::PendingMessageKind;
use ahp_types::Uri;

use crate::effect::BackendCmd;
use crate::shared::{Op, Shared};
use crate::session::Session;

impl Session {
    /// Hands `chat`'s steering message to its running turn when the
    /// chat's agent steers and has that turn (it is not waiting to be sent
    /// at a wake's end). Does nothing otherwise: the message stays held.
    /// Sending it twice is harmless: the agent takes a steering message
    /// once, and the newest it was handed.
    pub(crate) fn hand_steering(&mut self, sh: &mut Shared, chat: &Uri) {
        if !self.phase.is_live() || !sh.agent_steers(&self.record.provider) {
            return;
        }
        let Some(turn_id) = self.running_turn(chat) else { return };
        if self.work.pending_sends.iter().any(|(c, t, _)| c == chat && *t == turn_id) {
            return;
        }
        let Some(steering) = self.record.chats.iter().find(|c| c.resource == *chat).and_then(|c| c.steering.as_deref()) else { return };
        let command = BackendCmd::Steer { turn_id, id: steering.id.clone(), message: steering.message.clone() };
        crate::mark!("steering_handed");
        self.backend(sh, Op::Fire, chat.clone(), command);
    }

    /// The chat's agent took steering message `id` into running turn
    /// `turn_id`: off the record (written), then `chat/pendingMessageRemoved`
    /// from the host. A stale word (another turn runs, or the message was
    /// replaced or removed meanwhile) changes nothing. Returns whether the
    /// message was taken.
    pub(crate) fn steering_taken(&mut self, sh: &mut Shared, chat: &Uri, turn_id: &str, id: &str) -> bool {
        let running = self.running_turn(chat).is_some_and(|t| t == turn_id);
        let Some(record) = self.record.chats.iter_mut().find(|c| c.resource == *chat) else { return false };
        if !running || !record.steering.as_ref().is_some_and(|s| s.id == id) {
            crate::mark!("steering_taken_stale");
            return false;
        }
        record.steering = None;
        crate::mark!("steering_taken_by_turn");
        // Written at once, acknowledged at once: the agent has the message
        // whether or not this write lands. A crash before it lands brings
        // the message back held, and it runs as the next turn, as the turn
        // that took it comes back interrupted (DECISIONS 18).
        self.store_put(sh);
        let removed = ChatPendingMessageRemovedAction { kind: PendingMessageKind::Steering, id: id.to_owned() };
        self.emit(sh, chat, StateAction::ChatPendingMessageRemoved(removed), None);
        self.mark_activity(sh);
        self.after_chat_change(sh, chat);
        true
    }
}
