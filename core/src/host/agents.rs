//! A session's agents and turns as the host sequences them: what a
//! session's backend answers and says (a chat's agent started or not, a
//! turn taken, what an agent says unprompted: `Input::Backend` turn
//! actions, background work, files written, an exit), and a turn's life
//! (handed to its chat's agent after a wake, the chat's agent start or the
//! session's first git command; taken, which announces a provisional
//! session; ended, completed, cancelled or failed, and what every end
//! does).
//!
//! What only reads and writes the session is the session's own
//! (`session/starts.rs`, `session/agents.rs`, `session/turns.rs`); this
//! file sequences it with what reaches past the session (a wake, the count
//! of active sessions, the catalogue, checkpoints, awareness).
//!
//! ## Sleep, the residency limit and waking
//!
//! Sleep after idle, the residency limit, and waking (Sessions page, "Sleep
//! and wake"). Every rule of that section is decided here; the shell only
//! starts and closes agents when told.
//!
//! ## A graceful stop
//!
//! A graceful stop (issue 19: "SIGTERM drains"): no new turns are taken,
//! running turns get the grace to end, then are cancelled through their
//! backends and kept as cancelled (`crate::kept_turns`); the shell exits
//! once [`Host::drained`] and every store write is on disk.

use ahp_types::actions::{ChatTurnCancelledAction, StateAction};
use ahp_types::Uri;
use super::Host;
use crate::effect::{ConnId, Durability, LogLevel, OpId};
use crate::input::{BackendEvent, Outcome};
use crate::session::agents::TurnSend;
use crate::session::starts::StartNext;
use crate::session::handle::{SessionInput, SessionOut};
use crate::continuation::WaitingRequest;
use crate::facts::Fact;
use crate::session::sleep::SleepRefusal;
use crate::session::wake::WakeEnd;
use crate::session::{Phase, Waiter};
use crate::time::MonoTime;

pub(crate) use crate::session::handle::TurnEnder;

impl Host {
    /// A chat's agent started (or failed to): the session takes the answer
    /// ([`Session::start_answered`](crate::session::Session::start_answered)), and the host does what reaches past it.
    pub(crate) fn on_started(&mut self, session_uri: &Uri, chat: &Uri, op: OpId, outcome: Outcome) {
        let damaged = |host: &Host| host.sessions.get(session_uri).map(|s| s.damaged_chats());
        let damaged_before = damaged(self);
        let Some(next) = self.in_session(session_uri, |s, sh| s.start_answered(sh, chat, op, outcome)) else { return };
        if damaged(self) != damaged_before {
            // The row's status and words, or a chat's status, changed
            // (issue 25): any chat marked or cleared, not only the first.
            self.summary_changed(session_uri);
        }
        // A rewind whose forget the backend never confirmed: asked again
        // now its agent answered (issue 23, `session/rewind.rs`).
        self.in_session(session_uri, |s, sh| s.forget_owed(sh, chat));
        match next {
            StartNext::Nothing => {}
            StartNext::CreateRefused { asker, message, logged } => {
                match asker {
                    crate::session::Asker::Client { conn, id } => {
                        self.forget_unborn(session_uri);
                        self.tell(Fact::StartAnswered { session: session_uri, refused: Some(&message) });
                        self.shared.reply_error(conn, id, crate::protocol::error::error(crate::protocol::error::INTERNAL_ERROR, message));
                    }
                    crate::session::Asker::Tool(call) => {
                        let outs = self.tools().child_refused(session_uri, call, message);
                        self.apply_tools(outs);
                    }
                }
                if let Some(backend_said) = logged {
                    crate::mark!("create_refused_backend_failed");
                    self.shared.log(LogLevel::Warn, "session.create_failed", Some(session_uri.clone()), backend_said);
                }
            }
            StartNext::ChildStarted(call) => {
                let outs = self.tools().child_started(session_uri, call);
                self.apply_tools(outs);
            }
            StartNext::WakeDone => self.finish_wake(session_uri),
            StartNext::ChatStarted => self.chat_start_answered(session_uri, chat, None),
            StartNext::ChatFailed(message) => {
                crate::mark!("chat_start_failed");
                self.chat_start_answered(session_uri, chat, Some(&message));
                self.shared.log(LogLevel::Warn, "chat.start_failed", Some(session_uri.clone()), message);
            }
        }
        // A session made for an automation's run queues its message once live.
        self.tell(Fact::StartAnswered { session: session_uri, refused: None });
    }

    /// Removes a session whose creation was refused: it never existed.
    pub(crate) fn forget_unborn(&mut self, session_uri: &Uri) {
        if let Some(s) = self.drop_session(session_uri) {
            self.shared.retired.insert(session_uri.clone());
            for chat in &s.record().chats {
                self.shared.chats.remove(&chat.resource);
                self.shared.retired.insert(chat.resource.clone());
            }
            for c in self.shared.conns.values_mut() {
                c.subscriptions.remove(session_uri);
                for chat in &s.record().chats {
                    c.subscriptions.remove(&chat.resource);
                }
            }
        }
    }

    /// The backend acknowledged (or refused) a turn. The first turn a
    /// backend takes announces a provisional session: `root/sessionAdded`
    /// then `session/ready` (Sessions page, "The life of a session").
    pub(crate) fn on_sent(&mut self, session_uri: &Uri, op: OpId, outcome: Outcome) {
        let Some(session) = self.sessions.get_mut(session_uri) else { return };
        let Some((chat, turn_id)) = session.send_answered(op) else { return };
        match outcome {
            Outcome::Failed { message } => self.fail_turn(session_uri, &chat, &turn_id, &message),
            _ => self.agent_took_turn(session_uri, &chat),
        }
    }

    pub(crate) fn on_backend_event(&mut self, chat: &Uri, event: BackendEvent) {
        let Some(session_uri) = self.shared.chats.get(chat).map(|u| u.to_string()) else {
            self.shared.stats.stale_events += 1;
            return;
        };
        let live = self.sessions.get(&session_uri).is_some_and(|s| s.phase().is_live() && s.resident().is_some());
        if !live {
            self.shared.stats.stale_events += 1;
            return;
        }
        match event {
            BackendEvent::Busy(busy) => self.hand_to_session(&session_uri, SessionInput::Busy { chat, busy }),
            BackendEvent::Exited { message } => {
                if let Some(turn_id) = self.sessions.get(&session_uri).and_then(|s| s.running_turn(chat)) {
                    self.fail_turn(&session_uri, chat, &turn_id, &format!("the agent exited: {message}"));
                }
                crate::mark!("agent_exited");
                let can_resume = self.sessions.get(&session_uri).is_some_and(|s| s.can_resume());
                if can_resume {
                    // The other chats' agents are closed below and the
                    // session sleeps, which it does with nothing running
                    // (Sessions page, "Sleep and wake"): their turns end too
                    // (one was left running on an asleep session: sim
                    // issue 18).
                    let others = self.sessions.get(&session_uri).map(|s| s.running_turns_except(chat)).unwrap_or_default();
                    for (other, turn_id) in others {
                        self.fail_turn(&session_uri, &other, &turn_id, &format!("the session's agent exited: {message}"));
                    }
                }
                self.shared.log(LogLevel::Warn, "backend.exited", Some(session_uri.clone()), message);
                if !self.sessions.get(&session_uri).is_some_and(|s| s.can_resume()) {
                    // A backend that cannot resume never sleeps.
                    self.in_session(&session_uri, |s, sh| s.agent_exited_for_good(sh, chat));
                    return;
                }
                if self.in_session(&session_uri, |s, sh| s.asleep_after_exit(sh, chat)).unwrap_or(false) {
                    self.trees().archived_trees_go(&session_uri);
                }
            }
            BackendEvent::Wrote { paths } => {
                if let Some(s) = self.sessions.get_mut(&session_uri) {
                    s.count_chat_writes(&mut self.shared, chat, &paths);
                }
                self.aware().on_wrote(&session_uri, paths);
            }
            BackendEvent::Action(mut action) => {
                // Checked first, read-only: a refused action changes nothing.
                let Some(s) = self.sessions.get(&session_uri) else { return };
                let turn = match s.check_agent_action(chat, &mut action, self.shared.now.mono) {
                    Ok(turn) => turn,
                    Err(refusal) => return s.refuse_agent_action(&mut self.shared, refusal),
                };
                // The session's live peers ride along, to vet a declared
                // write against (workspace awareness).
                let Some((s, place)) = self.sessions.get_mut_placed(&session_uri) else { return };
                let peers = self.awareness.peers_of(&session_uri);
                let out = s.handle(&mut self.shared, &place, SessionInput::AgentAction { chat, action, turn, peers });
                self.apply_session_out(&session_uri, out);
            }
            BackendEvent::SteeringTaken { turn_id, id } => {
                self.hand_to_session(&session_uri, SessionInput::SteeringTaken { chat, turn_id: &turn_id, id: &id });
            }
        }
    }

    /// Hands `input` to session `uri`'s own rules ([`Session::handle`])
    /// and applies what it returns.
    pub(crate) fn hand_to_session(&mut self, uri: &Uri, input: SessionInput<'_>) {
        let Some((s, place)) = self.sessions.get_mut_placed(uri) else { return };
        let out = s.handle(&mut self.shared, &place, input);
        self.apply_session_out(uri, out);
    }

    /// Does what a session's input asked beyond the session
    /// ([`SessionOut`]): a turn's end goes on to the lifecycle's parts and
    /// the record ([`Host::after_turn_end`]).
    pub(crate) fn apply_session_out(&mut self, uri: &Uri, out: SessionOut) {
        if let Some(end) = out.turn_ended {
            self.after_turn_end(uri, &end.chat, end.checkpoint, end.ender);
        }
    }

    /// Does what became of a turn handed to a session asks of the host
    /// ([`TurnSend`]): a wake, or the held turns' failure.
    fn after_send(&mut self, session_uri: &Uri, sent: Option<TurnSend>) {
        match sent {
            Some(TurnSend::NeedsWake) => self.wake(session_uri),
            Some(TurnSend::Failed { pending, reason }) => {
                for (c, t, _) in pending {
                    self.fail_turn(session_uri, &c, &t, &reason);
                }
            }
            Some(TurnSend::Sent | TurnSend::Held) | None => {}
        }
    }

    /// Starts the next queued message of `session_uri` if one is due
    /// ([`Session::queue_due`](crate::session::Session::queue_due), then
    /// [`Session::park_queued_start`](crate::session::Session::park_queued_start);
    /// never while the host is stopping: the queue is kept and runs after
    /// the restart, once the session wakes). With `or_asleep` a sleeping
    /// session's queue starts too. The session is read first and handed
    /// out to change only when a start is due (what a checker reads as the
    /// sessions an input changed).
    pub(crate) fn start_queued_if_due(&mut self, session_uri: &Uri, or_asleep: bool) {
        if self.stopping() {
            return;
        }
        let Some(chat) = self.sessions.get(session_uri).and_then(|s| s.queue_due(or_asleep)) else { return };
        self.in_session(session_uri, |s, sh| s.park_queued_start(sh, &chat));
    }

    /// Tries again the queued starts the store refused whose wait is over
    /// ([`Session::take_queue_retry`](crate::session::Session::take_queue_retry));
    /// the timer table's `QueueRetry` kind.
    pub(crate) fn retry_queued_starts(&mut self) {
        let now = self.shared.now.mono;
        let due: Vec<Uri> = self.held_sessions().filter(|(_, s)| s.queue_retry_at().is_some_and(|t| t <= now)).map(|(uri, _)| uri.clone()).collect();
        for uri in due {
            if self.in_session(&uri, |s, _| s.take_queue_retry(now)) == Some(true) {
                crate::mark!("queued_start_retried");
                self.start_queued_if_due(&uri, false);
            }
        }
    }

    /// The earliest refused queued start's retry, if any (the timer
    /// table's `QueueRetry` deadline).
    pub(crate) fn queue_retry_deadline(&self) -> Option<MonoTime> {
        self.held_sessions().filter_map(|(_, s)| s.queue_retry_at()).min()
    }

    /// A turn started in the session (`chat/turnStarted` applied): the
    /// host's count of active sessions moves, and the session hands the
    /// turn to its chat's agent ([`Session::start_turn`](crate::session::Session::start_turn)),
    /// woken first when its agents are not running.
    pub(crate) fn turn_started(&mut self, session_uri: &Uri, chat: Uri, turn_id: String, message: std::sync::Arc<ahp_types::state::Message>) {
        self.recount_active();
        let sent = self.in_session(session_uri, |s, sh| s.start_turn(sh, chat, turn_id, message));
        self.after_send(session_uri, sent);
    }

    /// The agent of `chat` in a live session answered its start: the turns
    /// it held go to it, or fail with the start's `failure`. Turns still
    /// waiting for the session's first git command stay for it.
    pub(crate) fn chat_start_answered(&mut self, session_uri: &Uri, chat: &Uri, failure: Option<&str>) {
        let Some(held) = self.sessions.get_mut(session_uri).and_then(|s| s.take_held_sends(chat)) else { return };
        for (chat, turn_id, message) in held {
            match failure {
                Some(message) => self.fail_turn(session_uri, &chat, &turn_id, &format!("the chat's agent would not start: {message}")),
                None => {
                    self.in_session(session_uri, |s, sh| s.hand_to_agent(sh, chat, turn_id, message));
                }
            }
        }
    }

    /// The agent took a turn of `chat` ([`Session::took_turn`]).
    pub(crate) fn agent_took_turn(&mut self, session_uri: &Uri, chat: &Uri) {
        if let Some((s, place)) = self.sessions.get_mut_placed(session_uri) {
            s.took_turn(&mut self.shared, &place, chat);
        }
    }

    /// Ends a running turn with `chat/error` carrying `message`. For a
    /// session still provisional this also fails its creation:
    /// `session/creationFailed` after the turn's error, then
    /// `root/sessionAdded`, and its start is owed to the next send.
    pub(crate) fn fail_turn(&mut self, session_uri: &Uri, chat: &Uri, turn_id: &str, message: &str) {
        let Some(running) = self.in_session(session_uri, |s, sh| s.error_turn(sh, chat, turn_id, message)) else {
            return self.end_turn_bookkeeping(session_uri, chat, false, TurnEnder::Host);
        };
        let held = self.in_session(session_uri, |s, sh| s.fail_creation(sh, message)).flatten();
        if held.is_some() {
            // The creation failed: its agent goes, and the next send starts
            // it afresh (Sessions page: "held with its start owed").
            self.let_agents_go(session_uri);
            self.after_chat_change(session_uri, chat);
            self.announce(session_uri);
            crate::mark!("creation_failed_start_owed");
            self.shared.log(LogLevel::Warn, "session.creation_failed", Some(session_uri.clone()), message.to_owned());
        }
        self.end_turn_bookkeeping(session_uri, chat, running, TurnEnder::Host);
        // The other chats' turns that waited on the failed start end with
        // it; a message sent again tries again, as the first one's does.
        for (other, turn_id, _) in held.unwrap_or_default() {
            crate::mark!("creation_failed_ends_held_turn");
            self.fail_turn(session_uri, &other, &turn_id, &format!("the session's creation failed: {message}"));
        }
    }

    /// After a turn ended (completed, cancelled, failed): clear its clock,
    /// note activity, mirror the chat, recount, and persist the record.
    /// What every turn's end does, in this order: the chat's bookkeeping,
    /// the fact `TurnEnded` (to the parts that take it, `Host::tell`), the
    /// record (a child's finish numbered in it), then the fact
    /// `TurnWritten` (the parent told, the checkpoint of a turn that
    /// completed or failed for good, the queue's next message), and only
    /// then the residency check, so the
    /// checkpoint is work in hand that keeps the session from being evicted
    /// under it (issue 18: an eviction at a turn's end left its checkpoint
    /// running on a session that had gone).
    ///
    /// The record's write is [`Durability::WithNext`] when the turn's agent
    /// ended it and nothing else rides on the write (no child's finish is
    /// numbered in it, the host is not stopping): all it adds is the end
    /// of a turn the agent's own history holds, which a restart rebuilds
    /// (`crate::kept_turns::merge`) if a crash of the machine loses it
    /// (issue 21: a turn's end costs no fsync of its own; docs/DECISIONS.md,
    /// 32). A turn the host ended keeps how it ended in this write only:
    /// durable now.
    pub(crate) fn end_turn_bookkeeping(&mut self, session_uri: &Uri, chat: &Uri, checkpoint: bool, ender: TurnEnder) {
        self.in_session(session_uri, |s, sh| s.turn_ended(sh, chat));
        self.after_turn_end(session_uri, chat, checkpoint, ender);
    }

    /// A turn's end past the session, once the session has done its part
    /// ([`Session::turn_ended`]): see [`Host::end_turn_bookkeeping`].
    pub(crate) fn after_turn_end(&mut self, session_uri: &Uri, chat: &Uri, checkpoint: bool, ender: TurnEnder) {
        // A child's turn end is numbered in the record it is written with,
        // then told to its parent (`host/children.rs`).
        let child_finished = self.tell(Fact::TurnEnded { session: session_uri, chat }).child_finished;
        self.recount_active();
        let durability = match ender {
            TurnEnder::Agent if !child_finished && !self.stopping() => {
                crate::mark!("turn_end_written_with_next");
                Durability::WithNext
            }
            _ => Durability::Now,
        };
        self.in_session(session_uri, |s, sh| s.is_announced().then(|| s.store_put_with(sh, durability)));
        self.tell(Fact::TurnWritten { session: session_uri, checkpoint, child_finished });
    }

}

// ---- Sleep, the residency limit and waking (module docs) ----
impl Host {
    /// Coverage marks for the sessions whose quiet time is over but that
    /// may not sleep: the rule's refusals, seen where they decide.
    fn mark_sleep_refusals(&self, now: MonoTime) {
        if !cfg!(feature = "sim") || self.shared.config.sleep_after_ms == 0 {
            return;
        }
        let watched = self.watched();
        for (_, s) in self.held_sessions() {
            if s.last_activity().plus_ms(self.shared.config.sleep_after_ms) > now {
                continue;
            }
            match (s.phase().is_waking(), s.sleep_refusal(|| watched.session(s.record()))) {
                (true, _) => crate::mark!("sleep_refused_waking"),
                (_, Some(SleepRefusal::CannotResume)) => crate::mark!("sleep_refused_not_resumable"),
                (_, Some(SleepRefusal::WorkInHand)) if s.is_busy() => crate::mark!("sleep_refused_background_busy"),
                (_, Some(SleepRefusal::WorkInHand)) if s.has_open_question() => crate::mark!("sleep_refused_question"),
                (_, Some(SleepRefusal::WorkInHand)) if s.has_pending_messages() => crate::mark!("sleep_refused_pending_message"),
                (_, Some(SleepRefusal::WorkInHand)) => crate::mark!("sleep_refused_work_in_hand"),
                (_, Some(SleepRefusal::Watched)) => crate::mark!("sleep_refused_watched"),
                _ => {}
            }
        }
    }

    /// When the first held session falls asleep after idle, if any does.
    pub(crate) fn idle_sleep_deadline(&self) -> Option<MonoTime> {
        let watched = self.watched();
        self.held_sessions().filter_map(|(_, s)| s.sleep_due_at(self.shared.config.sleep_after_ms, || watched.session(s.record()))).min()
    }

    /// Puts every held session whose quiet has lasted `sleepAfterMinutes`
    /// to sleep (Sessions page, "Sleep and wake").
    pub(crate) fn fire_idle_sleeps(&mut self) {
        let now = self.shared.now.mono;
        let watched = self.watched();
        let due: Vec<Uri> = self
            .held_sessions()
            .filter(|(_, s)| s.sleep_due_at(self.shared.config.sleep_after_ms, || watched.session(s.record())).is_some_and(|t| t <= now))
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
    }

    /// When the once-a-minute residency sweep is next due, with a limit set.
    pub(crate) fn residency_sweep_deadline(&self) -> Option<MonoTime> {
        (self.shared.config.residency_limit > 0).then(|| self.last_sweep.plus_ms(self.shared.config.residency_sweep_ms.max(1)))
    }

    /// The once-a-minute sweep when due, then the residency limit, checked
    /// after every input.
    pub(crate) fn fire_residency(&mut self) {
        let now = self.shared.now.mono;
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
            self.trees().archived_trees_go(uri);
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
        let watched = self.watched();
        let archived: Vec<Uri> = self
            .held_sessions()
            .filter(|(_, s)| s.record().is_archived && s.evictable(|| watched.session(s.record())))
            .map(|(u, _)| u.clone())
            .collect();
        for uri in archived {
            crate::mark!("evict_archived_at_once");
            self.evict(&uri);
        }
        while self.resident_count() > self.shared.config.residency_limit {
            self.mark_eviction_skips();
            let watched = self.watched();
            let candidates = self.held_sessions().filter(|(_, s)| s.evictable(|| watched.session(s.record()))).map(|(u, s)| (u, s.last_used()));
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
        let watched = self.watched();
        for (_, s) in self.held_sessions().filter(|(_, s)| s.is_announced()) {
            if !matches!(s.phase(), Phase::Live { .. } | Phase::Asleep) {
                crate::mark!("evict_skip_changing_phase");
            } else if !s.can_resume() {
                crate::mark!("evict_skip_pinned_not_resumable");
            } else if s.has_work_in_hand() {
                crate::mark!("evict_skip_work_in_hand");
            } else if watched.session(s.record()) {
                crate::mark!("evict_skip_watched");
            }
        }
    }

    /// Lets the agent and the state go together. The record keeps what the
    /// catalogue row needs.
    fn evict(&mut self, uri: &Uri) {
        self.let_agents_go(uri);
        if let Some(s) = self.sessions.get_mut(uri) {
            s.drop_state();
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
        if !session.is_asleep() {
            if session.phase().is_waking() {
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
        if self.trees().restore_before_wake(uri) {
            return;
        }
        self.start_agents(uri);
    }

    /// Queues `message` (id `id`, sent by `sender`) on `chat` of session
    /// `uri`: into the record, echoed when the state is held, then started
    /// when due, waking the session if it sleeps. The record is written.
    /// How a host tool's message, a wake's prompt, a child's
    /// `childFinished` and an automation's run reach a chat.
    pub(crate) fn deliver(&mut self, uri: &Uri, chat: &Uri, id: String, message: ahp_types::state::Message, sender: String) {
        let Some(session) = self.sessions.get_mut(uri) else { return };
        if !session.queue_message(chat, crate::record::QueuedMessage { id: id.clone(), message: message.clone(), sender }) {
            return;
        }
        let held = session.resident().is_some_and(|r| r.chats.contains_key(chat));
        self.in_session(uri, |s, sh| {
            if held {
                let kind = ahp_types::state::PendingMessageKind::Queued;
                let action = StateAction::ChatPendingMessageSet(ahp_types::actions::ChatPendingMessageSetAction { kind, id, message });
                s.emit(sh, chat, action, None);
                s.after_chat_change(sh, chat);
            }
            s.mark_activity(sh);
        });
        self.store_put(uri);
        let Some(session) = self.sessions.get(uri) else { return };
        match (session.phase(), session.resident().is_some()) {
            (Phase::Live { .. }, _) => self.start_queued_if_due(uri, false),
            (Phase::Asleep, true) => {
                self.start_queued_if_due(uri, true);
                // Nothing could start it now (a write in flight): the
                // session is woken, and its wake's end starts the queue.
                if self.sessions.get(uri).is_some_and(|s| s.is_asleep() && s.work().parked.is_none()) {
                    crate::mark!("tool_message_wakes_held");
                    self.wake(uri);
                }
            }
            (Phase::Asleep, false) => {
                crate::mark!("tool_message_wakes_unloaded");
                self.wake(uri);
            }
            // A wake under way starts the queue when it ends; a session
            // still starting, when it is live.
            _ => crate::mark!("tool_message_waits_for_wake"),
        }
    }

    /// Starts every chat's agent and moves the session to `Waking`
    /// ([`Session::start_agents`](crate::session::Session::start_agents)).
    pub(crate) fn start_agents(&mut self, uri: &Uri) {
        self.in_session(uri, |s, sh| s.start_agents(sh));
    }

    /// Every resume of a wake answered ([`Session::end_wake`](crate::session::Session::end_wake)). On success
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
                self.tell(Fact::WakeEnded { session: uri, failed: Some(&reason) });
            }
            WakeEnd::Woke { pending, waiters } => {
                self.held.insert(uri.clone());
                for (chat, turn_id, message) in pending {
                    let sent = self.in_session(uri, |s, sh| s.send_live(sh, chat, turn_id, message));
                    self.after_send(uri, sent);
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
                            let busy = self.sessions.get(uri).is_some_and(|s| s.work().parked.is_some() || !s.work().inbox.is_empty());
                            if busy {
                                if let Some(s) = self.sessions.get_mut(uri) {
                                    s.queue(crate::session::Queued::Action(q));
                                }
                            } else {
                                self.process_action(uri, q);
                            }
                        }
                    }
                }
                self.tell(Fact::WakeEnded { session: uri, failed: None });
            }
        }
    }

    /// Runs a request that waited for a wake on from its decoded form.
    fn resume_request(&mut self, conn: ConnId, id: u64, request: WaitingRequest) {
        match request {
            WaitingRequest::Subscribe(request) => self.subscribe(conn, id, request),
            WaitingRequest::FetchTurns(request) => self.fetch_turns(conn, id, request),
            WaitingRequest::CreateChat(request) => self.create_chat(conn, id, *request),
            WaitingRequest::MoveChat(request) => self.move_chat(conn, id, request),
        }
    }

    /// Before a wake: a session read back whose folder is no longer trusted
    /// (the list changed since it was made) is not started; the turns and
    /// requests waiting on it fail saying why, and it stays asleep.
    /// Returns true when the wake was refused.
    pub(crate) fn refuse_untrusted_wake(&mut self, session_uri: &Uri) -> bool {
        let Some(session) = self.sessions.get(session_uri) else { return false };
        let Err(reason) = self.trusted(&session.record().working_directories) else { return false };
        crate::mark!("wake_refused_untrusted_folder");
        self.shared.log(LogLevel::Warn, "session.untrusted_folder", Some(session_uri.clone()), reason.clone());
        let Some(session) = self.sessions.get_mut(session_uri) else { return true };
        let (pending, waiters) = session.take_held();
        let reason = format!("the session was not woken: {reason}");
        for (chat, turn_id, _) in pending {
            self.fail_turn(session_uri, &chat, &turn_id, &reason);
        }
        self.fail_waiters_with(session_uri, waiters, crate::protocol::error::PERMISSION_DENIED, &reason);
        true
    }
}

/// The stop in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drain {
    /// When running turns are cancelled (monotonic).
    pub until: MonoTime,
    /// The grace ran out and the turns still running were cancelled.
    pub cut: bool,
}

// ---- A graceful stop (module docs) ----
impl Host {
    /// `Input::Shutdown`: stop taking turns; cancel the running ones after
    /// `grace_ms` (at once for 0).
    pub(crate) fn on_shutdown(&mut self, grace_ms: u64) {
        if self.drain.is_some() {
            return;
        }
        let running = self.running_turns().len();
        crate::mark!("shutdown_drains");
        self.shared.log(LogLevel::Info, "host.draining", None, format!("{running} turns running; they get {grace_ms} ms to end"));
        self.drain = Some(Drain { until: self.shared.now.mono.plus_ms(grace_ms), cut: false });
        self.drain_due();
    }

    /// Whether the host is stopping (turns are refused).
    pub(crate) fn stopping(&self) -> bool {
        self.drain.is_some()
    }

    /// When the grace runs out, if it has not yet.
    pub(crate) fn drain_deadline(&self) -> Option<MonoTime> {
        self.drain.filter(|d| !d.cut).map(|d| d.until)
    }

    /// The grace ran out: every turn still running is cancelled through its
    /// backend and ends cancelled (kept by the host until the backend has
    /// it).
    pub(crate) fn drain_due(&mut self) {
        let Some(drain) = self.drain else { return };
        if drain.cut || self.shared.now.mono < drain.until {
            return;
        }
        self.drain = Some(Drain { cut: true, ..drain });
        let running = self.running_turns();
        if !running.is_empty() {
            crate::mark!("shutdown_cancels_running_turns");
            self.shared.log(LogLevel::Warn, "host.turns_cancelled", None, format!("{} turns still running at the end of the grace were cancelled", running.len()));
        }
        for (session, chat, turn_id) in running {
            let cancel = ChatTurnCancelledAction { turn_id, duration: 0, meta: None };
            if self.in_session(&session, |s, sh| s.cancel_turn(sh, &chat, cancel, None)) != Some(true) {
                continue;
            }
            // The turn's end as `end_turn_bookkeeping` counts it, but with
            // no residency check between two cancels: one would take a
            // session whose turn is cancelled only later in this loop. The
            // next sweep runs it.
            self.in_session(&session, |s, sh| s.turn_ended(sh, &chat));
            self.recount_active();
            // A child's finish is numbered, and owed to its parent while
            // the host stops: delivered after the restart.
            self.tell(Fact::TurnCut { session: &session, chat: &chat });
            self.store_put(&session);
        }
    }

    /// Every turn running in a held session: (session, chat, turn id).
    fn running_turns(&self) -> Vec<(Uri, Uri, String)> {
        self.held_sessions().flat_map(|(uri, s)| s.running_turns().into_iter().map(move |(chat, turn)| (uri.clone(), chat, turn))).collect()
    }

    /// A stop is under way and nothing it waits for is left: no turn runs,
    /// no turn waits to reach its agent, no client action waits for its
    /// write. The shell then finishes the store's writes and exits.
    pub fn drained(&self) -> bool {
        self.drain.is_some()
            && self.running_turns().is_empty()
            && self.sessions.values().all(|s| s.work().pending_sends.is_empty() && s.work().sends_in_flight.is_empty() && s.work().parked.is_none())
    }
}
