//! A session's own half of "Sleep and wake" (Sessions page): whether it
//! may fall asleep after idle, and whether the residency limit may take its
//! state. The other half, whether a client watches it, is the host's to
//! say (it knows the connections); it is asked last, and only when the
//! session's own state allows.

use crate::session::{Phase, Session};
use crate::time::MonoTime;

/// Why a session may not fall asleep now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SleepRefusal {
    /// It is not live: being made, waking ("A session does not sleep while
    /// it is waking"), asleep already, or being disposed.
    NotLive,
    /// "A session whose backend cannot resume it never sleeps."
    CannotResume,
    /// Work in hand ([`Session::has_work_in_hand`]): "a session does not
    /// sleep while any of its chats has a turn running ...".
    WorkInHand,
    /// "... nor while a client is subscribed to it."
    Watched,
}

impl Session {
    /// Why this session may not sleep now, or `None` when it may.
    /// `watched` says whether a client watches it (asked only when nothing
    /// else refuses).
    pub fn sleep_refusal(&self, watched: impl FnOnce() -> bool) -> Option<SleepRefusal> {
        if !self.phase.is_live() {
            Some(SleepRefusal::NotLive)
        } else if !self.can_resume {
            Some(SleepRefusal::CannotResume)
        } else if self.has_work_in_hand() {
            Some(SleepRefusal::WorkInHand)
        } else if watched() {
            Some(SleepRefusal::Watched)
        } else {
            None
        }
    }

    /// When this session falls asleep if nothing moves (`sleep_after_ms`,
    /// in ms, after its last activity), or `None` when it may not sleep
    /// now or sleep is off (`sleep_after_ms` 0).
    pub fn sleep_due_at(&self, sleep_after_ms: u64, watched: impl FnOnce() -> bool) -> Option<MonoTime> {
        if sleep_after_ms == 0 || self.sleep_refusal(watched).is_some() {
            return None;
        }
        Some(self.last_activity.plus_ms(sleep_after_ms))
    }

    /// Whether the residency limit may take this session's state now:
    /// nothing said in it yet means it does not count; a watched session,
    /// one with work in hand, one waking or being made or disposed, and one
    /// whose backend cannot resume it all stay.
    pub fn evictable(&self, watched: impl FnOnce() -> bool) -> bool {
        self.resident.is_some()
            && self.is_announced()
            && matches!(self.phase, Phase::Live { .. } | Phase::Asleep)
            // Its turns could not be rebuilt: the host's copy is all there is.
            && self.can_resume
            && !self.has_work_in_hand()
            && !watched()
    }

    /// Whether a chat of the session has a question waiting for an answer
    /// ("a question waiting for an answer" keeps a session awake;
    /// `session/questions.rs`). Only held state has questions.
    pub fn has_open_question(&self) -> bool {
        self.resident.as_ref().is_some_and(|r| r.chats.values().any(|c| !crate::session::questions::open(c).is_empty()))
    }

    /// Whether a chat of the session holds a message pending, queued or
    /// steering, in its state or (while the state is not held) its record.
    pub fn has_pending_messages(&self) -> bool {
        match self.resident.as_ref() {
            Some(r) => r.chats.values().any(|c| c.steering_message.is_some() || c.queued_messages.as_ref().is_some_and(|q| !q.is_empty())),
            None => self.record.chats.iter().any(|c| c.steering.is_some() || !c.queued.is_empty()),
        }
    }

    /// Whether the session has work in hand: a turn running, a message
    /// pending or queued or steering, a tool call or question waiting, a
    /// send not yet acknowledged, a store write parked, background work, or
    /// waiters (Sessions page, "Sleep and wake": "Quiet means ... nothing is
    /// in hand").
    pub fn has_work_in_hand(&self) -> bool {
        let chat_work = self.resident.as_ref().is_some_and(|r| {
            r.chats.values().any(|c| {
                c.active_turn.is_some()
                    // "... or a question waiting for an answer" (one only
                    // lives in a running turn: `session/questions.rs`).
                    || !crate::session::questions::open(c).is_empty()
                    || c.steering_message.is_some()
                    || c.queued_messages.as_ref().is_some_and(|q| !q.is_empty())
            }) || r.session.input_needed.as_ref().is_some_and(|i| !i.is_empty())
        });
        chat_work
            || self.is_busy()
            || !self.work.sends_in_flight.is_empty()
            // Turns accepted and not yet handed to the agent (waiting for a
            // wake or for the first send's tree).
            || !self.work.pending_sends.is_empty()
            || self.work.parked.is_some()
            || !self.work.inbox.is_empty()
            || !self.work.waiters.is_empty()
            || !self.work.git_ops.is_empty()
            // A chat's agent starting in a live session: its answer carries
            // the conversation id a later wake resumes (issue 19, seed 1631:
            // a sleep made the answer stale and the chat's turns were lost).
            || matches!(&self.phase, Phase::Live { starting } if !starting.is_empty())
    }
}
