//! `queued_message_once` (issue 23): "a queued message starts exactly once,
//! in order, after the turn before it ends", and "a queued message is never
//! lost across a restart nor run twice".
//!
//! Seen from what the host sends: every queued message the host
//! acknowledged (`chat/pendingMessageSet` echoed, which it does only once
//! durable) is, from then on, still queued, or became exactly one turn
//! (`chat/turnStarted` naming it as its `queuedMessageId`, once), or was
//! removed by a client's `chat/pendingMessageRemoved`, echoed or, when no
//! subscriber heard the echo, seen gone from its chat's record. After a
//! restart each one still queued is in its chat's record again: in its
//! queue, or, when the write that started it was durable but its echo was
//! lost in the crash, as the turn it became (a sender recorded under its
//! id). A client's removal whose write was in flight at a crash may have
//! landed: the message is then gone, as the client asked (the removal,
//! like every client action, is applied once durable and a crash may take
//! its echo, docs/DECISIONS.md, 2). The messages the host queues itself
//! (a host tool's, an automation run's) are echoed when their write is
//! issued and may be gone after a crash. The order within a queue is the
//! core's `inv_queue_matches_record` with the `ahp` reducer's.

use std::collections::BTreeMap;

use ahp_types::actions::StateAction;
use ahp_types::state::PendingMessageKind;
use ahp_types::Uri;
use ahpd_core::invariants::Violation;
use ahpd_core::session::ParkedWork;
use ahpd_core::{Effect, HostView, Outbound};

/// Where one acknowledged queued message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Still queued.
    Queued,
    /// Still queued, and a client's removal of it is parked with its write
    /// in flight (`Session::park`): it applies and is echoed once durable,
    /// so a crash before then may leave it removed or queued.
    RemovalWriting,
    /// Became a turn.
    Started,
    /// A client removed it.
    Removed,
    /// Gone from its chat's record with no removal or turn heard: a
    /// client's removal whose echo reached no subscriber (one may remove a
    /// message on a chat it does not watch, or drop before the echo). The
    /// write may not be durable yet, so after a restart it may be queued
    /// again ([`QueueHistory::on_host_start`] decides), or start.
    RemovedUnheard,
    /// A steering message the running turn took (the host's own
    /// `chat/pendingMessageRemoved` with no turn started from it). Its
    /// write is not waited for: after a crash before it landed it is held
    /// again and may run as a turn (docs/DECISIONS.md, 18).
    Steered,
}

/// Every queued message the host acknowledged, by chat and id.
#[derive(Debug, Clone, Default)]
pub struct QueueHistory {
    fates: BTreeMap<(Uri, String), Fate>,
    /// Each chat's steering message as last seen set: a new one replaces
    /// it, which removes it with no removal of its own.
    steering: BTreeMap<Uri, String>,
    /// The last `serverSeq` read: an envelope goes to each subscriber as an
    /// effect of its own, and is read once.
    last_seq: u64,
    /// The host's own steering removals of this step: the one before a
    /// turn started from the message (`Session::start_queued`), or a
    /// running turn took it.
    host_removed: Vec<(Uri, String)>,
    /// The messages the host queued itself through `Host::deliver`: a
    /// host tool's (`_meta["ahpd.hostTool"]`: a wake's prompt, a
    /// `send_message`, a `childFinished`) and an automation run's
    /// (`_meta["ahpd.automation"]`). Echoed when their write is issued,
    /// not durable (docs/DECISIONS.md, 20), so a crash may take one away: a
    /// `childFinished` so lost is delivered again under another id
    /// (docs/DECISIONS.md, 24; `child_finished_once` checks it reaches the
    /// agent once), and a run whose message was lost was left `running`,
    /// which a restart fails ("the host stopped before the run ended",
    /// docs/DECISIONS.md, 25; 100k-seed run, seed 49826).
    host_made: std::collections::BTreeSet<(Uri, String)>,
}

fn breach(detail: String) -> Violation {
    Violation { rule: "queued_message_once", detail }
}

impl QueueHistory {
    /// One effect of the host, in order.
    pub fn on_effect(&mut self, effect: &Effect) -> Result<(), Violation> {
        let Effect::Send { message: Outbound::Action(broadcast), .. } = effect else { return Ok(()) };
        let envelope = broadcast.envelope();
        if envelope.rejection_reason.is_some() || envelope.server_seq <= self.last_seq {
            return Ok(());
        }
        self.last_seq = envelope.server_seq;
        let chat = &envelope.channel;
        match &envelope.action {
            StateAction::ChatPendingMessageSet(a) => {
                if a.kind == PendingMessageKind::Steering {
                    if let Some(before) = self.steering.insert(chat.clone(), a.id.clone()) {
                        if let Some(fate @ Fate::Queued) = self.fates.get_mut(&(chat.clone(), before)) {
                            *fate = Fate::Removed;
                        }
                    }
                }
                let by_host = |m: &serde_json::Map<String, serde_json::Value>| {
                    m.contains_key(ahpd_core::host::TOOL_META_KEY) || m.contains_key(ahpd_core::automation::RUN_META_KEY)
                };
                if a.message.meta.as_ref().is_some_and(by_host) {
                    self.host_made.insert((chat.clone(), a.id.clone()));
                }
                self.fates.insert((chat.clone(), a.id.clone()), Fate::Queued);
            }
            // A client's removal.
            StateAction::ChatPendingMessageRemoved(a) if envelope.origin.is_some() => {
                if let Some(fate) = self.fates.get_mut(&(chat.clone(), a.id.clone())) {
                    *fate = Fate::Removed;
                }
            }
            // The host's own: followed in the same step by the turn the
            // message becomes, else a running turn took a steering message.
            StateAction::ChatPendingMessageRemoved(a) => {
                if let Some(fate @ Fate::Queued) = self.fates.get_mut(&(chat.clone(), a.id.clone())) {
                    if a.kind == PendingMessageKind::Steering {
                        *fate = Fate::Steered;
                    }
                }
                self.host_removed.push((chat.clone(), a.id.clone()));
            }
            StateAction::ChatTurnStarted(a) => {
                let Some(id) = &a.queued_message_id else { return Ok(()) };
                match self.fates.get_mut(&(chat.clone(), id.clone())) {
                    Some(fate @ (Fate::Queued | Fate::RemovedUnheard)) => *fate = Fate::Started,
                    // One write is parked at a time, so a queued start
                    // waits for the removal's.
                    Some(Fate::RemovalWriting) => return Err(breach(format!("{chat}: queued message {id} started a turn ({}) while a client's removal of it was being written", a.turn_id))),
                    // Taken off by the host just now to become this turn.
                    Some(fate @ Fate::Steered) if self.host_removed.iter().any(|(c, i)| c == chat && i == id) => *fate = Fate::Started,
                    Some(Fate::Steered) => return Err(breach(format!("{chat}: steering message {id}, taken by a running turn, started a turn of its own ({})", a.turn_id))),
                    Some(Fate::Started) => return Err(breach(format!("{chat}: queued message {id} started a second turn ({})", a.turn_id))),
                    Some(Fate::Removed) => return Err(breach(format!("{chat}: queued message {id} started after a client removed it"))),
                    // Its echo reached no subscriber (a client may queue on
                    // a chat it does not watch): nothing was seen of it.
                    None => {
                        self.fates.insert((chat.clone(), id.clone()), Fate::Started);
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// A host (re)started from the store: every acknowledged message still
    /// queued whose chat the host still knows is in that chat's record,
    /// queued or as the turn it became.
    pub fn on_host_start(&mut self, view: &HostView<'_>) -> Result<(), Violation> {
        self.last_seq = 0;
        for ((chat, id), fate) in self.fates.iter_mut() {
            if !matches!(fate, Fate::Queued | Fate::RemovedUnheard | Fate::Steered | Fate::RemovalWriting) {
                continue;
            }
            let Some(session) = view.chats.get(chat).and_then(|s| view.sessions.get(s)) else { continue };
            let Some(record) = session.record().chats.iter().find(|c| c.resource == *chat) else { continue };
            if record.queued.iter().any(|m| m.id == *id) || record.steering.as_ref().is_some_and(|s| s.id == *id) {
                // The unheard removal, or the taking by a turn, was not durable: held again.
                *fate = Fate::Queued;
                continue;
            }
            // The client's removal landed though its echo was lost in the
            // crash (100k-seed run, seed 75996).
            if matches!(fate, Fate::RemovedUnheard | Fate::Steered | Fate::RemovalWriting) {
                *fate = Fate::Removed;
                continue;
            }
            if record.senders.get(id).is_some() || (2..100).any(|n| record.senders.get(&format!("{id}.{n}")).is_some()) {
                *fate = Fate::Started;
                continue;
            }
            if self.host_made.contains(&(chat.clone(), id.clone())) {
                // Its write was issued, not yet durable, at the crash.
                *fate = Fate::Removed;
                continue;
            }
            return Err(breach(format!("{chat}: acknowledged queued message {id} is gone after the restart")));
        }
        Ok(())
    }

    /// After a step: a message still taken as queued that its chat's record
    /// (the host's own, written ahead) no longer holds, neither queued nor
    /// as the turn it became, was removed by a client whose echo no
    /// subscriber heard. One it holds whose removal by a client is parked
    /// (the record the store was sent lacks it; the host's keeps it until
    /// that write is durable) may be gone after a crash.
    pub fn after_step(&mut self, view: &HostView<'_>) {
        self.host_removed.clear();
        for ((chat, id), fate) in self.fates.iter_mut() {
            if !matches!(fate, Fate::Queued | Fate::RemovalWriting) {
                continue;
            }
            let Some(session) = view.chats.get(chat).and_then(|s| view.sessions.get(s)) else { continue };
            let Some(record) = session.record().chats.iter().find(|c| c.resource == *chat) else { continue };
            let held = record.queued.iter().any(|m| m.id == *id)
                || record.steering.as_ref().is_some_and(|s| s.id == *id)
                || record.senders.get(id).is_some()
                || (2..100).any(|n| record.senders.get(&format!("{id}.{n}")).is_some());
            let removing = session.work().parked.as_ref().is_some_and(|p| match &p.work {
                ParkedWork::Action(q) => q.channel == *chat && matches!(&q.action, StateAction::ChatPendingMessageRemoved(a) if a.id == *id),
                _ => false,
            });
            *fate = match (held, removing) {
                (false, _) => Fate::RemovedUnheard,
                (true, true) => Fate::RemovalWriting,
                // Its removal's write was refused (the action rejected), or
                // none is parked.
                (true, false) => Fate::Queued,
            };
        }
    }

    /// Forgets the messages of chats that are gone (disposed with their
    /// queue): a chat made again under the URI starts with none.
    pub fn forget_gone(&mut self, view: &HostView<'_>) {
        self.fates.retain(|(chat, _), _| view.chats.contains_key(chat));
    }
}
