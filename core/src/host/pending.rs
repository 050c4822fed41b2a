//! A chat's queued messages, the host's part (issue 23): when a queued
//! message is due to start as its chat's next turn, and what follows once
//! the write that starts it is durable. The rules of a queue are the
//! session's own (`crate::session::pending`).

use ahp_types::Uri;

use super::Host;
use crate::effect::LogLevel;
use crate::session::actions::ActionNext;

impl Host {
    /// Starts the next queued message of `session_uri` if one is due
    /// (`Session::queue_due`; never while the host is stopping: the queue
    /// is kept and runs after the restart, once the session wakes). With
    /// `or_asleep` a sleeping session's queue starts too (a message queued
    /// in an idle chat is a send, and wakes its session as one does). One
    /// start is parked at a time; the next is seen to when its write
    /// settles (`Host::on_parked_write`).
    pub(crate) fn start_queued_if_due(&mut self, session_uri: &Uri, or_asleep: bool) {
        if self.stopping() {
            return;
        }
        let Some(chat) = self.sessions.get(session_uri).and_then(|s| s.queue_due(or_asleep)) else { return };
        self.in_session(session_uri, |s, sh| s.park_queued_start(sh, &chat));
    }

    /// The write starting `chat`'s queued message `queued_id` as turn
    /// `turn_id` settled: durable, it starts (echoed, recounted, handed to
    /// the agent as any turn); refused by the store, the message stays
    /// queued, the failure is logged and the start is tried again after a
    /// wait that doubles with each refusal in a row
    /// (`session::queue_retry_wait_ms`: 1 s up to a minute;
    /// [`Host::retry_queued_starts`]).
    pub(crate) fn finish_queued_start(&mut self, session_uri: &Uri, chat: Uri, turn_id: String, queued_id: String, failure: Option<String>) {
        let now = self.shared.now.mono;
        let Some(session) = self.sessions.get_mut(session_uri) else { return };
        if let Some(message) = failure {
            crate::mark!("queued_start_not_saved");
            session.work.queue_refusals = session.work.queue_refusals.saturating_add(1);
            let wait = crate::session::queue_retry_wait_ms(session.work.queue_refusals);
            session.work.queue_retry_at = Some(now.plus_ms(wait));
            self.shared.log(LogLevel::Warn, "queue.start_not_saved", Some(session_uri.clone()), format!("{message}; tried again in {wait} ms"));
            return;
        }
        session.work.queue_refusals = 0;
        let next = self.in_session(session_uri, |s, sh| s.start_queued(sh, &chat, turn_id, queued_id)).flatten();
        if let Some(ActionNext::TurnStarted { turn_id, message }) = next {
            self.recount_active();
            self.send_turn(session_uri, chat, turn_id, message);
        }
    }

    /// Tries again the queued starts the store refused whose wait is over
    /// (`Work::queue_retry_at`); the host's deadline includes the earliest
    /// ([`Host::queue_retry_deadline`]).
    pub(crate) fn retry_queued_starts(&mut self) {
        let now = self.shared.now.mono;
        let due: Vec<Uri> = self.held_sessions().filter(|(_, s)| s.work.queue_retry_at.is_some_and(|t| t <= now)).map(|(uri, _)| uri.clone()).collect();
        for uri in due {
            crate::mark!("queued_start_retried");
            if let Some(s) = self.sessions.get_mut(&uri) {
                s.work.queue_retry_at = None;
            }
            self.start_queued_if_due(&uri, false);
        }
    }

    /// The earliest refused queued start's retry, if any.
    pub(crate) fn queue_retry_deadline(&self) -> Option<crate::time::MonoTime> {
        self.held_sessions().filter_map(|(_, s)| s.work.queue_retry_at).min()
    }
}
