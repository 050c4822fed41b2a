//! Sleep after idle, the residency limit, and waking (Sessions page, "Sleep
//! and wake"). Every rule of that section is decided here; the shell only
//! starts and closes agents when told.


use ahp_types::Uri;

use super::Host;
use crate::continuation::WaitingRequest;
use crate::effect::{ConnId, LogLevel};
use crate::session::sleep::SleepRefusal;
use crate::session::wake::WakeEnd;
use crate::session::{Phase, Waiter};
use crate::time::MonoTime;

impl Host {
    /// Coverage marks for the sessions whose quiet time is over but that
    /// may not sleep: the rule's refusals, seen where they decide.
    fn mark_sleep_refusals(&self, now: MonoTime) {
        if !cfg!(feature = "sim") || self.shared.config.sleep_after_ms == 0 {
            return;
        }
        for (_, s) in self.held_sessions() {
            if s.last_activity.plus_ms(self.shared.config.sleep_after_ms) > now {
                continue;
            }
            match (s.phase.is_waking(), s.sleep_refusal(|| self.is_watched(s))) {
                (true, _) => crate::mark!("sleep_refused_waking"),
                (_, Some(SleepRefusal::CannotResume)) => crate::mark!("sleep_refused_not_resumable"),
                (_, Some(SleepRefusal::WorkInHand)) if s.is_busy() => crate::mark!("sleep_refused_background_busy"),
                (_, Some(SleepRefusal::WorkInHand)) => crate::mark!("sleep_refused_work_in_hand"),
                (_, Some(SleepRefusal::Watched)) => crate::mark!("sleep_refused_watched"),
                _ => {}
            }
        }
    }

    /// Fires what is due at the current time: handshakes whose wait is over
    /// are answered, then idle sleeps, then the once-a-minute residency
    /// sweep.
    pub(crate) fn fire_due(&mut self) {
        self.answer_overdue_handshakes();
        let now = self.shared.now.mono;
        let due: Vec<Uri> = self
            .held_sessions()
            .filter(|(_, s)| s.sleep_due_at(self.shared.config.sleep_after_ms, || self.is_watched(s)).is_some_and(|t| t <= now))
            .map(|(uri, _)| uri.clone())
            .collect();
        self.mark_sleep_refusals(now);
        for uri in due {
            crate::mark!("sleep_after_idle");
            self.let_agents_go(&uri);
            self.went.push((uri.clone(), super::Went::Slept));
            self.shared.stats.sleeps += 1;
            self.shared.log(LogLevel::Info, "session.slept", Some(uri), String::new());
        }
        let period = self.shared.config.residency_sweep_ms.max(1);
        if self.shared.config.residency_limit > 0 && now >= self.last_sweep.plus_ms(period) {
            // Catch up by whole periods so the deadline stays on the minute.
            let periods = (now.0 - self.last_sweep.0) / period;
            self.last_sweep = self.last_sweep.plus_ms(periods * period);
        }
        // The page names the moments to check (sessions starting, clients
        // subscribing and leaving, turns starting and ending, once a
        // minute); checking after every input covers all of them and keeps
        // the limit an invariant of every state the host is in. This is
        // the only call: a check in the middle of an input picks among
        // sessions whose work that input is still settling (a failed
        // resume's waiters not yet failed), and the least recently used
        // one may not be the one that goes (sim seeds 5696, 16305, 16894).
        self.check_residency();
    }

    /// Closes every chat's agent and moves a live session to `Asleep`; its
    /// state stays held.
    pub(crate) fn let_agents_go(&mut self, uri: &Uri) {
        if self.in_session(uri, |s, sh| s.let_agents_go(sh)) == Some(true) {
            self.archived_trees_go(uri);
        }
    }

    /// A live session's agents start again in its new process root (the
    /// tree its first send made, Sessions page: "every agent is started
    /// again there before the turn runs"): closed and started at once,
    /// live to waking. It never passes through asleep, so nothing a sleep
    /// does (an archived session's trees going, a sleep counted) happens to
    /// a session with a turn in hand.
    pub(crate) fn restart_agents(&mut self, uri: &Uri) {
        self.in_session(uri, |s, sh| {
            if s.close_agents(sh) {
                s.start_agents(sh);
            }
        });
    }

    /// Sessions that count against the limit: state held and something said.
    pub(crate) fn resident_count(&self) -> usize {
        self.held_sessions().filter(|(_, s)| s.is_announced()).count()
    }

    /// Applies the residency limit: archived sessions go at once, then the
    /// least recently used evictable sessions until the count is within the
    /// limit (ties on the LRU stamp break on the URI).
    pub(crate) fn check_residency(&mut self) {
        if self.shared.config.residency_limit == 0 {
            return;
        }
        let archived: Vec<Uri> = self
            .held_sessions()
            .filter(|(_, s)| s.record.is_archived && s.evictable(|| self.is_watched(s)))
            .map(|(u, _)| u.clone())
            .collect();
        for uri in archived {
            crate::mark!("evict_archived_at_once");
            self.evict(&uri);
        }
        while self.resident_count() > self.shared.config.residency_limit {
            self.mark_eviction_skips();
            let candidates = self.held_sessions().filter(|(_, s)| s.evictable(|| self.is_watched(s))).map(|(u, s)| (u, s.last_used));
            let victim = crate::lru::least_recent(candidates).cloned();
            match victim {
                Some(uri) => {
                    crate::mark!("evict_least_recently_used");
                    self.evict(&uri);
                }
                None => {
                    crate::mark!("residency_over_limit_all_pinned");
                    break;
                }
            }
        }
    }

    /// Coverage marks for the counted sessions the limit may not take:
    /// "None goes while a client watches it or while it has work in hand",
    /// and one whose backend cannot resume it is pinned.
    fn mark_eviction_skips(&self) {
        if !cfg!(feature = "sim") {
            return;
        }
        for (_, s) in self.held_sessions().filter(|(_, s)| s.is_announced()) {
            if !matches!(s.phase, Phase::Live { .. } | Phase::Asleep) {
                crate::mark!("evict_skip_changing_phase");
            } else if !s.can_resume {
                crate::mark!("evict_skip_pinned_not_resumable");
            } else if s.has_work_in_hand() {
                crate::mark!("evict_skip_work_in_hand");
            } else if self.is_watched(s) {
                crate::mark!("evict_skip_watched");
            }
        }
    }

    /// Lets the agent and the state go together. The record keeps what the
    /// catalogue row needs.
    fn evict(&mut self, uri: &Uri) {
        self.let_agents_go(uri);
        if let Some(s) = self.sessions.get_mut(uri) {
            s.resident = None;
        }
        self.held.remove(uri);
        // The row is read from the record now: say what that moved.
        self.summary_changed(uri);
        self.went.push((uri.clone(), super::Went::Evicted));
        self.shared.stats.evictions += 1;
        self.shared.log(LogLevel::Info, "session.evicted", Some(uri.clone()), String::new());
    }

    /// Starts a wake unless one is running: every chat's agent is resumed
    /// (started afresh when its creation failed and its start is owed).
    /// Wakers that arrive while it runs share it.
    pub(crate) fn wake(&mut self, uri: &Uri) {
        let Some(session) = self.sessions.get(uri) else { return };
        if session.phase != Phase::Asleep {
            if session.phase.is_waking() {
                // "Wakers that arrive together share one resume."
                crate::mark!("wake_coalesced");
            }
            return;
        }
        // No agent starts in a folder that is no longer trusted.
        if self.refuse_untrusted_wake(uri) {
            return;
        }
        // An archived session's tree, off the disk, comes back first.
        if self.restore_before_wake(uri) {
            return;
        }
        self.start_agents(uri);
    }

    /// Starts every chat's agent and moves the session to `Waking`
    /// ([`Session::start_agents`]).
    pub(crate) fn start_agents(&mut self, uri: &Uri) {
        self.in_session(uri, |s, sh| s.start_agents(sh));
    }

    /// Every resume of a wake answered ([`Session::end_wake`]). On success
    /// the session's state is held and live: the turns it held go to their
    /// agents and every waiter is served, in arrival order. On failure each
    /// fails with the backend's error and the session stays asleep.
    pub(crate) fn finish_wake(&mut self, uri: &Uri) {
        let Some(end) = self.in_session(uri, |s, sh| s.end_wake(sh)).flatten() else { return };
        match end {
            WakeEnd::Failed { pending, waiters, reason } => {
                for (chat, turn_id, _) in pending {
                    self.fail_turn(uri, &chat, &turn_id, &reason);
                }
                self.fail_waiters(uri, waiters, &reason);
            }
            WakeEnd::Woke { pending, waiters } => {
                self.held.insert(uri.clone());
                for (chat, turn_id, message) in pending {
                    // A first send waits for its tree and `turn/0` (host/git.rs).
                    if self.hold_for_git(uri, &chat, &turn_id, &message) {
                        continue;
                    }
                    self.in_session(uri, |s, sh| s.hand_to_agent(sh, chat, turn_id, message));
                }
                for waiter in waiters {
                    match waiter {
                        Waiter::Request { conn, id, request } => {
                            if self.may_resume(conn, id) {
                                self.resume_request(conn, id, request);
                            }
                        }
                        Waiter::Handshake { conn, id } => self.handshake_settled(conn, id, uri),
                        Waiter::Action(q) => {
                            let busy = self.sessions.get(uri).is_some_and(|s| s.parked.is_some() || !s.inbox.is_empty());
                            if busy {
                                if let Some(s) = self.sessions.get_mut(uri) {
                                    s.inbox.push_back(crate::session::Queued::Action(q));
                                }
                            } else {
                                self.process_action(uri, q);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Runs a request that waited for a wake on from its decoded form.
    fn resume_request(&mut self, conn: ConnId, id: u64, request: WaitingRequest) {
        match request {
            WaitingRequest::Subscribe(request) => self.subscribe(conn, id, request),
            WaitingRequest::FetchTurns(request) => self.fetch_turns(conn, id, request),
            WaitingRequest::CreateChat(request) => self.create_chat(conn, id, *request),
        }
    }

    /// Before a wake: a session read back whose folder is no longer trusted
    /// (the list changed since it was made) is not started; the turns and
    /// requests waiting on it fail saying why, and it stays asleep.
    /// Returns true when the wake was refused.
    pub(crate) fn refuse_untrusted_wake(&mut self, session_uri: &Uri) -> bool {
        let Some(session) = self.sessions.get(session_uri) else { return false };
        let Err(reason) = self.trusted(&session.record.working_directories) else { return false };
        crate::mark!("wake_refused_untrusted_folder");
        self.shared.log(LogLevel::Warn, "session.untrusted_folder", Some(session_uri.clone()), reason.clone());
        let Some(session) = self.sessions.get_mut(session_uri) else { return true };
        let pending = std::mem::take(&mut session.pending_sends);
        let waiters = std::mem::take(&mut session.waiters);
        let reason = format!("the session was not woken: {reason}");
        for (chat, turn_id, _) in pending {
            self.fail_turn(session_uri, &chat, &turn_id, &reason);
        }
        self.fail_waiters_with(session_uri, waiters, crate::protocol::error::PERMISSION_DENIED, &reason);
        true
    }
}
