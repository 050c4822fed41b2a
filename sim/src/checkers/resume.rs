//! `turn_resumed_once` (issue 23, resume): "`chat/turnResume` on a turn
//! that ended in an error the client may resume restarts it", seen from
//! what the host sends and holds: every accepted `chat/turnResume` names
//! a turn the chat last ended in a resumable error (checked while this
//! process heard every envelope since it saw that end, with no gap in
//! `serverSeq`: an end no subscriber heard is not seen, and after a
//! restart the history is the backend's), and once the input that took it is done, that turn is
//! the chat's running one and the chat's agent was told to go on with it
//! (`BackendCmd::Resume`) in that input.

use std::collections::BTreeMap;

use ahp_types::actions::StateAction;
use ahp_types::Uri;
use ahpd_core::invariants::Violation;
use ahpd_core::{BackendCmd, Effect, HostView, Outbound};

/// What this checker saw of a chat's last turn.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Last {
    /// A turn started (or was resumed) and its end was not seen yet.
    Running,
    /// It ended; `Some(id)`: in a resumable error of turn `id`.
    Ended(Option<String>),
}

/// The chats' last turns as seen, and the resumes taken in the input
/// being checked.
#[derive(Debug, Clone, Default)]
pub struct ResumeHistory {
    /// Per chat; a chat not listed is unknown.
    last: BTreeMap<Uri, Last>,
    /// Resumes accepted in this input: chat, turn, whether the agent was
    /// told.
    taken: Vec<(Uri, String, bool)>,
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
            match self.taken.iter_mut().find(|(c, t, told)| c == chat && t == turn_id && !*told) {
                Some(entry) => entry.2 = true,
                // Its echo reached no subscriber: nothing was seen of it.
                None => self.taken.push((chat.clone(), turn_id.clone(), true)),
            }
            return Ok(());
        }
        let Effect::Send { message: Outbound::Action(broadcast), .. } = effect else { return Ok(()) };
        let envelope = broadcast.envelope();
        if envelope.server_seq <= self.last_seq {
            return Ok(());
        }
        // An envelope no subscriber heard (a gap in `serverSeq`) may have
        // been any chat's turn end: what was seen is no longer known to
        // be the last.
        if self.last_seq != 0 && envelope.server_seq != self.last_seq + 1 {
            self.last.clear();
        }
        self.last_seq = envelope.server_seq;
        if envelope.rejection_reason.is_some() {
            return Ok(());
        }
        let chat = &envelope.channel;
        match &envelope.action {
            StateAction::ChatError(a) => {
                let resumable = a.part.resumable == Some(true);
                self.last.insert(chat.clone(), Last::Ended(resumable.then(|| a.turn_id.clone())));
            }
            StateAction::ChatTurnComplete(_) | StateAction::ChatTurnCancelled(_) => {
                self.last.insert(chat.clone(), Last::Ended(None));
            }
            StateAction::ChatTurnStarted(_) => {
                self.last.insert(chat.clone(), Last::Running);
            }
            // A rewind keeping the resumable turn leaves it last; one to an
            // earlier turn leaves a last turn whose end may not have been seen.
            StateAction::ChatTruncated(a) => {
                if self.last.get(chat) != Some(&Last::Ended(a.turn_id.clone())) {
                    self.last.remove(chat);
                }
            }
            StateAction::ChatTurnResume(a) => {
                if let Some(Last::Ended(end)) = self.last.get(chat) {
                    if end.as_deref() != Some(a.turn_id.as_str()) {
                        return Err(breach(format!("{chat}: turn {} resumed, but the chat's last end seen was {end:?}", a.turn_id)));
                    }
                }
                self.last.insert(chat.clone(), Last::Running);
                if !self.taken.iter().any(|(c, t, _)| c == chat && *t == a.turn_id) {
                    self.taken.push((chat.clone(), a.turn_id.clone(), false));
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// After each input: every resume taken in it runs in its chat and
    /// went to its agent.
    pub fn after_step(&mut self, view: &HostView<'_>) -> Result<(), Violation> {
        for (chat, turn_id, told) in self.taken.drain(..) {
            if !told {
                return Err(breach(format!("{chat}: turn {turn_id} resumed but never handed to its agent")));
            }
            let running = view
                .chats
                .get(&chat)
                .and_then(|uri| view.sessions.get(&**uri))
                .and_then(|s| s.resident())
                .and_then(|r| r.chats.get(&chat))
                .and_then(|c| c.active_turn.as_ref())
                .map(|t| t.id.clone());
            if running.as_deref() != Some(turn_id.as_str()) {
                return Err(breach(format!("{chat}: turn {turn_id} resumed, but the chat runs {running:?}")));
            }
        }
        Ok(())
    }

    /// A host (re)started: what it said before is history the backend now
    /// holds; every chat is unknown again.
    pub fn on_host_start(&mut self) {
        self.last.clear();
        self.taken.clear();
    }
}
