//! `turn_resumed_once` (issue 23, resume): "`chat/turnResume` on a turn
//! that ended in an error the client may resume restarts it", seen from
//! what the host sends: every accepted `chat/turnResume` names the turn
//! its chat last ended with a resumable `chat/error` (when this process
//! saw that end: after a restart the history is the backend's, and the
//! reducer's own condition is the core's), and in the same input the
//! host hands that turn to the chat's agent (`BackendCmd::Resume`).

use std::collections::BTreeMap;

use ahp_types::actions::StateAction;
use ahp_types::Uri;
use ahpd_core::invariants::Violation;
use ahpd_core::{BackendCmd, Effect, Outbound};

/// What the host said of each chat's last turn end, and the resumes it
/// owes the agents in the input being checked.
#[derive(Debug, Clone, Default)]
pub struct ResumeHistory {
    /// Per chat: `Some(id)` when its last turn end seen was a resumable
    /// error of turn `id`, `None` when another end or a start came since.
    /// A chat not listed is unknown (not seen since the host started).
    last_end: BTreeMap<Uri, Option<String>>,
    /// Resumes accepted in this input, not yet handed to the agent.
    owed: Vec<(Uri, String)>,
    /// The last `serverSeq` read: an envelope goes to each subscriber as an
    /// effect of its own, and is read once.
    last_seq: u64,
}

fn breach(detail: String) -> Violation {
    Violation { rule: "turn_resumed_once", detail }
}

impl ResumeHistory {
    /// One effect of the host, in order.
    pub fn on_effect(&mut self, effect: &Effect) -> Result<(), Violation> {
        if let Effect::Backend { chat, command: BackendCmd::Resume { turn_id }, .. } = effect {
            match self.owed.iter().position(|(c, t)| c == chat && t == turn_id) {
                Some(i) => {
                    self.owed.remove(i);
                }
                // Its echo reached no subscriber: nothing was seen of it.
                None => {}
            }
            return Ok(());
        }
        let Effect::Send { message: Outbound::Action(broadcast), .. } = effect else { return Ok(()) };
        let envelope = broadcast.envelope();
        if envelope.rejection_reason.is_some() || envelope.server_seq <= self.last_seq {
            return Ok(());
        }
        self.last_seq = envelope.server_seq;
        let chat = &envelope.channel;
        match &envelope.action {
            StateAction::ChatError(a) => {
                let resumable = a.part.resumable == Some(true);
                self.last_end.insert(chat.clone(), resumable.then(|| a.turn_id.clone()));
            }
            // A rewind keeping the resumable turn leaves it last; one to an
            // earlier turn leaves a last turn whose end was seen long ago.
            StateAction::ChatTruncated(a) => {
                if self.last_end.get(chat).and_then(Option::as_deref) != a.turn_id.as_deref() {
                    self.last_end.remove(chat);
                }
            }
            StateAction::ChatTurnStarted(_) | StateAction::ChatTurnComplete(_) | StateAction::ChatTurnCancelled(_) => {
                self.last_end.insert(chat.clone(), None);
            }
            StateAction::ChatTurnResume(a) => {
                if let Some(last) = self.last_end.get(chat) {
                    if last.as_deref() != Some(a.turn_id.as_str()) {
                        return Err(breach(format!("{chat}: turn {} resumed, but the chat's last end was {last:?}", a.turn_id)));
                    }
                }
                self.last_end.insert(chat.clone(), None);
                self.owed.push((chat.clone(), a.turn_id.clone()));
            }
            _ => {}
        }
        Ok(())
    }

    /// After each input: every resume accepted in it went to its agent.
    pub fn after_step(&mut self) -> Result<(), Violation> {
        match self.owed.drain(..).next() {
            Some((chat, turn_id)) => Err(breach(format!("{chat}: turn {turn_id} resumed but never handed to its agent"))),
            None => Ok(()),
        }
    }

    /// A host (re)started: what it said before is history the backend now
    /// holds; every chat is unknown again.
    pub fn on_host_start(&mut self) {
        self.last_end.clear();
        self.owed.clear();
    }
}
