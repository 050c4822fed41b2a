//! `question_answered_once` (issue 23, "Questions"): a question is
//! answered at most once. Seen from what the host does: one
//! `chat/inputCompleted` echoed (not refused) per question, from a client
//! or the host's cancel at its turn's end, and at most one answer sent to
//! the backend (`BackendCmd::Answer`), which a cancel at the turn's end
//! never sends. Request ids are unique across a run (the sim's agent
//! numbers them), so a chat and an id name one question.

use std::collections::BTreeSet;

use ahp_types::actions::StateAction;
use ahp_types::Uri;
use ahpd_core::invariants::Violation;
use ahpd_core::{BackendCmd, Effect, Outbound};

/// Every question completed, and every answer sent, by chat and id.
#[derive(Debug, Clone, Default)]
pub struct QuestionHistory {
    completed: BTreeSet<(Uri, String)>,
    answered: BTreeSet<(Uri, String)>,
    /// The last `serverSeq` read: an envelope goes to each subscriber as an
    /// effect of its own, and is read once.
    last_seq: u64,
}

fn breach(detail: String) -> Violation {
    Violation { rule: "question_answered_once", detail }
}

impl QuestionHistory {
    /// One effect of the host, in order.
    pub fn on_effect(&mut self, effect: &Effect) -> Result<(), Violation> {
        match effect {
            Effect::Backend { chat, command: BackendCmd::Answer { request, .. }, .. } => {
                if !self.answered.insert((chat.clone(), request.id.clone())) {
                    return Err(breach(format!("{chat}: question {} answered to the agent twice", request.id)));
                }
                Ok(())
            }
            Effect::Send { message: Outbound::Action(broadcast), .. } => {
                let envelope = broadcast.envelope();
                if envelope.rejection_reason.is_some() || envelope.server_seq <= self.last_seq {
                    return Ok(());
                }
                self.last_seq = envelope.server_seq;
                if let StateAction::ChatInputCompleted(a) = &envelope.action {
                    if !self.completed.insert((envelope.channel.clone(), a.request_id.clone())) {
                        return Err(breach(format!("{}: question {} completed twice", envelope.channel, a.request_id)));
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// A host (re)started: `serverSeq` starts again.
    pub fn on_host_start(&mut self) {
        self.last_seq = 0;
    }
}
