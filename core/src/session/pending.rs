//! A chat's pending messages (issue 23; AHP `chat/pendingMessageSet`,
//! `chat/pendingMessageRemoved`, `chat/queuedMessagesReordered`): the
//! messages a client queues while a turn runs, each run as the chat's next
//! turn when the one before it ends, in order.
//!
//! A queued message is the host's own durable data, like a turn's sender
//! (Sessions page, "The life of a session": "who sent each turn"): every
//! change to a chat's queue is written ahead into the chat's record
//! ([`crate::record::ChatRecord::queued`]) and echoed only once that write
//! is durable (docs/DECISIONS.md, 2). The host takes the first one off and
//! starts it as a turn in one record write, parked like a client's action
//! ([`Session::park_queued_start`]); only once that write is durable does it
//! echo `chat/pendingMessageRemoved` and `chat/turnStarted` with its
//! `queuedMessageId` ([`Session::start_queued`]). So an acknowledged queued
//! message is, after any crash, either still queued or exactly one turn.
//!
//! The rules of when ([`Session::queue_due`], which `Host::start_queued_if_due`
//! asks, adding that the host is not stopping): a chat's next queued message starts when the chat runs no turn and has
//! no send waiting, the session is live with no write parked or queued
//! behind one, and the host is not stopping; a message queued in an idle
//! chat
//! starts at once (ahp-types: "the server SHOULD immediately consume it"),
//! waking its session if it sleeps. A queue keeps its session from sleeping
//! (`Session::has_work_in_hand`) and wakes nothing by itself: after a
//! restart, or an agent that exited, the queue waits in the record until
//! something else wakes the session, and its next turn starts when the wake
//! ends (docs/USER-GUIDE.md, "Queued messages"). A start the store refused
//! is tried again after a wait that doubles with each refusal in a row
//! ([`Session::finish_queued_start`], [`Session::take_queue_retry`]; the
//! host's timer table fires it).

use ahp_types::actions::{ActionOrigin, ChatPendingMessageRemovedAction, ChatTurnStartedAction, StateAction};
use ahp_types::state::{ChatState, MessageKind, PendingMessage, PendingMessageKind};
use ahp_types::Uri;

use crate::effect::LogLevel;
use crate::shared::Shared;
use crate::record::{ChatRecord, QueuedMessage, SessionRecord};
use crate::session::actions::{ActionNext, ActionRules};
use crate::session::{Parked, ParkedWork, QueuedAction, Session};

/// The longest pending message id taken, in bytes (as a turn id).
pub const PENDING_ID_MAX_BYTES: usize = 256;

/// Whether `action` is one of the pending-message actions this module
/// takes from clients.
pub fn is_pending_action(action: &StateAction) -> bool {
    matches!(
        action,
        StateAction::ChatPendingMessageSet(_) | StateAction::ChatPendingMessageRemoved(_) | StateAction::ChatQueuedMessagesReordered(_)
    )
}

/// A chat's queue as its state shows it (`ChatState.queuedMessages`), from
/// its record: `None` when empty, as the reducer leaves it.
pub fn queued_state(chat: &ChatRecord) -> Option<Vec<PendingMessage>> {
    (!chat.queued.is_empty()).then(|| chat.queued.iter().map(|q| PendingMessage { id: q.id.clone(), message: q.message.clone() }).collect())
}

/// A chat's steering message as its state shows it (`steeringMessage`),
/// from its record.
pub fn steering_state(chat: &ChatRecord) -> Option<PendingMessage> {
    chat.steering.as_ref().map(|s| PendingMessage { id: s.id.clone(), message: s.message.clone() })
}

/// The checks a client's pending-message action must pass against `chat`'s
/// state (the chat exists and the session's state is held: the caller
/// checked). `Err` is the `rejectionReason` the client reads.
pub fn check(action: &StateAction, chat: &ChatState, rules: &ActionRules<'_>) -> Result<(), String> {
    let queued = chat.queued_messages.as_deref().unwrap_or_default();
    match action {
        StateAction::ChatPendingMessageSet(a) => {
            if a.id.is_empty() || a.id.len() > PENDING_ID_MAX_BYTES {
                return Err(format!("a pending message id must be 1 to {PENDING_ID_MAX_BYTES} bytes"));
            }
            rules.message_cap("message", &a.message)?;
            if a.message.origin.kind != MessageKind::User {
                return Err("a pending message from a client must carry a user message".into());
            }
            // One id names one pending message: the reducer starts a turn
            // from an id by taking it off the queue and the steering slot
            // alike.
            let other_kind = match a.kind {
                PendingMessageKind::Queued => chat.steering_message.as_ref().is_some_and(|s| s.id == a.id),
                PendingMessageKind::Steering => queued.iter().any(|m| m.id == a.id),
            };
            if other_kind {
                return Err("that id already names another pending message of this chat".into());
            }
            // A steering message replaces the one before: never more than one.
            let replaces = a.kind == PendingMessageKind::Steering || queued.iter().any(|m| m.id == a.id);
            if !replaces && queued.len() >= rules.queued_messages_per_chat {
                crate::mark!("queue_full_refused");
                return Err(format!("this chat already holds {} queued messages, the limit", rules.queued_messages_per_chat));
            }
            Ok(())
        }
        StateAction::ChatPendingMessageRemoved(a) => {
            let present = match a.kind {
                PendingMessageKind::Queued => queued.iter().any(|m| m.id == a.id),
                PendingMessageKind::Steering => chat.steering_message.as_ref().is_some_and(|m| m.id == a.id),
            };
            if present {
                Ok(())
            } else {
                Err("no such pending message in this chat".into())
            }
        }
        StateAction::ChatQueuedMessagesReordered(a) => {
            if queued.is_empty() {
                return Err("this chat has no queued messages to reorder".into());
            }
            if a.order.len() > rules.queued_messages_per_chat {
                return Err(format!("an order names at most {} queued messages", rules.queued_messages_per_chat));
            }
            Ok(())
        }
        _ => Err("not a pending-message action".into()),
    }
}

/// Applies a client's pending-message action `q` to the chat's durable
/// queue, exactly as the `ahp` reducer applies it to the chat's state (so
/// the two agree: `invariants::inv_queue_matches_record`). `sender` is who
/// queued a message.
pub fn apply_to_record(record: &mut SessionRecord, q: &QueuedAction, sender: Option<String>) {
    let Some(chat) = record.chats.iter_mut().find(|c| c.resource == q.channel) else { return };
    match &q.action {
        StateAction::ChatPendingMessageSet(a) if a.kind == PendingMessageKind::Queued => {
            let entry = QueuedMessage { id: a.id.clone(), message: a.message.clone(), sender: sender.unwrap_or_default() };
            match chat.queued.iter_mut().find(|m| m.id == a.id) {
                Some(existing) => *existing = entry,
                None => chat.queued.push(entry),
            }
        }
        StateAction::ChatPendingMessageSet(a) => {
            chat.steering = Some(Box::new(QueuedMessage { id: a.id.clone(), message: a.message.clone(), sender: sender.unwrap_or_default() }));
        }
        StateAction::ChatPendingMessageRemoved(a) if a.kind == PendingMessageKind::Queued => chat.queued.retain(|m| m.id != a.id),
        StateAction::ChatPendingMessageRemoved(a) => {
            if chat.steering.as_ref().is_some_and(|s| s.id == a.id) {
                chat.steering = None;
            }
        }
        StateAction::ChatQueuedMessagesReordered(a) => {
            let mut left = std::mem::take(&mut *chat.queued);
            for id in &a.order {
                if let Some(i) = left.iter().position(|m| m.id == *id) {
                    chat.queued.push(left.remove(i));
                }
            }
            // The reducer puts the ones the order does not name last,
            // sorted by id.
            left.sort_by(|x, y| x.id.cmp(&y.id));
            chat.queued.extend(left);
        }
        _ => {}
    }
}


impl Session {
    /// The turn id a queued message runs as: its own id when it may name a
    /// new turn of `chat` ([`Session::turn_id_taken`], the rule a client's
    /// turn is held to), else the first of `<id>.2`, `<id>.3`, ... that may.
    fn turn_id_for(&self, chat: &Uri, state: &ChatState, id: &str) -> String {
        if !self.turn_id_taken(chat, state, id) {
            return id.to_owned();
        }
        (2..).map(|n| format!("{id}.{n}")).find(|t| !self.turn_id_taken(chat, state, t)).unwrap_or_default()
    }

    /// Applies a checked and durable pending-message action from a client
    /// on `channel` (the reducer, the echo with `origin`, the chat
    /// mirrored). `Some(ActionNext::QueueChanged)` tells the host to see
    /// whether a queued message is due now; `None` when the reducer
    /// refused it.
    pub(crate) fn apply_pending_action(&mut self, sh: &mut Shared, channel: &Uri, action: StateAction, origin: Option<ActionOrigin>) -> Option<ActionNext> {
        let steers = matches!(&action, StateAction::ChatPendingMessageSet(a) if a.kind == PendingMessageKind::Steering);
        if !self.emit(sh, channel, action, origin) {
            return None;
        }
        self.mark_activity(sh);
        self.after_chat_change(sh, channel);
        if steers {
            self.hand_steering(sh, channel);
        }
        Some(ActionNext::QueueChanged(channel.clone()))
    }

    /// The first chat (in the session's order) whose next queued message is
    /// due now: it runs no turn and has no send waiting, and the session
    /// holds its state, is live (or, with `or_asleep`, asleep: the start
    /// then wakes it), owes no start, and has no write parked or waiting.
    /// The host adds that it is not stopping.
    pub fn queue_due(&self, or_asleep: bool) -> Option<Uri> {
        let phase_ok = self.phase.is_live() || (or_asleep && self.phase == crate::session::Phase::Asleep);
        // A refused start waits for its retry (`Work::queue_retry_at`).
        if !phase_ok || self.start_owed || self.work.parked.is_some() || !self.work.inbox.is_empty() || self.work.queue_retry_at.is_some() {
            return None;
        }
        let resident = self.resident.as_ref()?;
        self.record.chats.iter().find_map(|c| {
            let state = resident.chats.get(&c.resource)?;
            let idle = state.active_turn.is_none() && !self.work.pending_sends.iter().any(|(chat, _, _)| *chat == c.resource);
            (idle && (c.steering.is_some() || !c.queued.is_empty())).then(|| c.resource.clone())
        })
    }

    /// Takes `chat`'s steering message (held: its agent does not steer, or
    /// the turn before ended without taking it: `session/steering.rs`),
    /// else its first queued message, off and records it as a turn
    /// (its sender the client who queued it, the turn kept until the
    /// backend has it: `crate::kept_turns`) in one record write, and parks
    /// the start until that write is durable ([`Session::start_queued`]).
    /// Does nothing when the chat has no queued message.
    pub(crate) fn park_queued_start(&mut self, sh: &mut Shared, chat: &Uri) {
        let Some(record) = self.record.chats.iter().find(|c| c.resource == *chat) else { return };
        let Some(first) = record.steering.as_deref().or(record.queued.first()) else { return };
        let Some(state) = self.resident.as_ref().and_then(|r| r.chats.get(chat)) else { return };
        let turn_id = self.turn_id_for(chat, state, &first.id);
        let queued_id = first.id.clone();
        let saved = self.record.clone();
        self.take_queued_into_record(chat, &turn_id, &queued_id, &sh.now.wall.to_iso());
        let op = self.store_put(sh);
        self.record = saved;
        if let Some(op) = op {
            crate::mark!("queued_start_parked");
            self.work.parked = Some(Box::new(Parked { op, work: ParkedWork::StartQueued { chat: chat.clone(), turn_id, queued_id }, kept: None }));
        }
    }

    /// Writes into the record what starting queued message `queued_id` as
    /// turn `turn_id` of `chat` at `started_at` changes: the message off
    /// the queue, its sender as the turn's, the turn kept. Returns the
    /// message, or `None` when the queue no longer holds it.
    fn take_queued_into_record(&mut self, chat: &Uri, turn_id: &str, queued_id: &str, started_at: &str) -> Option<(QueuedMessage, PendingMessageKind)> {
        let after = self.last_turn(chat);
        let record = self.record.chats.iter_mut().find(|c| c.resource == *chat)?;
        let (taken, kind) = if record.steering.as_ref().is_some_and(|s| s.id == queued_id) {
            (*record.steering.take()?, PendingMessageKind::Steering)
        } else {
            let i = record.queued.iter().position(|m| m.id == queued_id)?;
            (record.queued.remove(i), PendingMessageKind::Queued)
        };
        // As the reducer's `chat/turnStarted` with this `queuedMessageId`
        // does: whatever else the id names goes too.
        record.queued.retain(|m| m.id != queued_id);
        if record.steering.as_ref().is_some_and(|s| s.id == queued_id) {
            record.steering = None;
        }
        let after = after.as_ref().map(|(id, n)| (id.as_str(), *n));
        crate::session::actions::record_turn_start(record, turn_id, started_at, std::sync::Arc::new(taken.message.clone()), taken.sender.clone(), after);
        Some((taken, kind))
    }

    /// The write taking queued message `queued_id` off `chat`'s queue as
    /// turn `turn_id` is durable: the record takes it, and the host says so
    /// (`chat/pendingMessageRemoved`, then `chat/turnStarted` with the
    /// `queuedMessageId`); what every started turn does follows
    /// ([`Session::apply_client_action`]'s). `None` when the message is no
    /// longer queued or a turn runs after all (nothing then changes).
    pub(crate) fn start_queued(&mut self, sh: &mut Shared, chat: &Uri, turn_id: String, queued_id: String) -> Option<ActionNext> {
        let running = self.resident.as_ref().and_then(|r| r.chats.get(chat)).is_none_or(|c| c.active_turn.is_some());
        if running {
            return None;
        }
        let started_at = sh.now.wall.to_iso();
        let (taken, kind) = self.take_queued_into_record(chat, &turn_id, &queued_id, &started_at)?;
        match kind {
            PendingMessageKind::Steering => crate::mark!("steering_held_as_next_turn"),
            PendingMessageKind::Queued => crate::mark!("queued_message_started"),
        }
        let removed = ChatPendingMessageRemovedAction { kind, id: queued_id.clone() };
        self.emit(sh, chat, StateAction::ChatPendingMessageRemoved(removed), None);
        let start = ChatTurnStartedAction { turn_id, started_at, message: taken.message, queued_message_id: Some(queued_id), meta: None };
        self.apply_client_action(sh, chat, StateAction::ChatTurnStarted(start), None)
    }
}

/// When a queued message starts, and its start's write settling: the
/// session's own decisions (they read and write only this session; the
/// host adds whether it is stopping and applies what comes back).
impl Session {
    /// The write starting `chat`'s queued message `queued_id` as turn
    /// `turn_id` settled: durable, it starts ([`Session::start_queued`];
    /// `Some(ActionNext::TurnStarted)` tells the host to recount and hand
    /// the turn on, as any started turn); refused by the store
    /// (`failure`), the message stays queued, the failure is logged and the
    /// start is tried again after a wait that doubles with each refusal in
    /// a row ([`crate::session::queue_retry_wait_ms`]: 1 s up to a minute;
    /// [`Session::take_queue_retry`]).
    pub(crate) fn finish_queued_start(&mut self, sh: &mut Shared, chat: &Uri, turn_id: String, queued_id: String, failure: Option<String>) -> Option<ActionNext> {
        if let Some(message) = failure {
            crate::mark!("queued_start_not_saved");
            self.work.queue_refusals = self.work.queue_refusals.saturating_add(1);
            let wait = crate::session::queue_retry_wait_ms(self.work.queue_refusals);
            self.work.queue_retry_at = Some(sh.now.mono.plus_ms(wait));
            sh.log(LogLevel::Warn, "queue.start_not_saved", Some(self.record.resource.clone()), format!("{message}; tried again in {wait} ms"));
            return None;
        }
        self.work.queue_refusals = 0;
        self.start_queued(sh, chat, turn_id, queued_id)
    }

    /// When a start the store refused is tried again
    /// (`Work::queue_retry_at`), if one waits: a deadline of the host's
    /// timer table.
    pub(crate) fn queue_retry_at(&self) -> Option<crate::time::MonoTime> {
        self.work.queue_retry_at
    }

    /// Whether a refused start's wait is over at `now`; if so the wait is
    /// cleared, so the caller tries the start again (`Host::start_queued_if_due`).
    pub(crate) fn take_queue_retry(&mut self, now: crate::time::MonoTime) -> bool {
        if self.work.queue_retry_at.is_none_or(|t| t > now) {
            return false;
        }
        self.work.queue_retry_at = None;
        true
    }
}
