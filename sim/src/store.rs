//! The simulated session store: durable records, writes in flight, and what
//! a crash does to them.
//!
//! Writes to one key are applied and answered in the order they were issued
//! (the shell writes one file per session, atomically); writes to different
//! keys complete out of order. A write is durable when its `Done` is sent,
//! except a put made `Durability::WithNext` (a turn's end): answered, it
//! waits in [`Store::volatile`] until the next durable write's answer
//! makes it durable too (the shell's journal: one fsync covers every line
//! before it). At a host crash every unanswered or volatile write is lost
//! or, by a coin per key in issue order, made durable without its answer
//! (the fsync finished, the reply did not). (The shell also syncs a
//! volatile write after 200 ms of quiet; the sim never does, so a crash
//! may take back more than the daemon's would.)

use std::collections::BTreeMap;

use ahpd_core::{Input, OpId, Outcome, SessionRecord, StoreCmd};

use crate::options::Options;
use crate::queue::{Event, Lane, Queue};
use crate::rng::SimRng;

/// One write in flight.
#[derive(Debug, Clone, PartialEq)]
pub struct Write {
    /// The host's op id.
    pub op: OpId,
    /// The store key.
    pub key: String,
    /// The record to put, or `None` for a delete.
    pub record: Option<SessionRecord>,
    /// Whether it will fail.
    pub fail: bool,
    /// Whether it is an automation's write (applied when issued, in
    /// [`Store::automations`]; only its answer waits).
    pub automation: bool,
    /// Made `Durability::WithNext`: answered before it is durable.
    pub with_next: bool,
}

/// The last write to a key that the host was told is durable.
#[derive(Debug, Clone, PartialEq)]
pub enum Acked {
    /// A put of this record.
    Put(Box<SessionRecord>),
    /// A delete.
    Delete,
}

/// Counters of what the store did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Writes acknowledged durable.
    pub acked: u64,
    /// Writes failed.
    pub failed: u64,
    /// Writes lost at a crash.
    pub lost: u64,
    /// Writes that reached the disk at a crash without an answer.
    pub durable_unacked: u64,
    /// Writes made `Durability::WithNext` answered before they were
    /// durable.
    pub with_next: u64,
    /// Of those, lost at a crash before another write made them durable.
    pub with_next_lost: u64,
}

/// The store.
#[derive(Debug, Clone, Default)]
pub struct Store {
    /// What is on disk, by key.
    pub durable: BTreeMap<String, SessionRecord>,
    /// Writes in flight, by the store's own id.
    pub inflight: BTreeMap<u64, Write>,
    /// The last acknowledged write per key that is durable.
    pub acked: BTreeMap<String, Acked>,
    /// Puts made `Durability::WithNext` that were answered but are not
    /// durable yet, in answer order: the next durable write's answer makes
    /// them durable; a crash loses them (or, by a coin, not).
    pub volatile: Vec<(String, SessionRecord)>,
    /// The write that landed last (its key and record, `None` for a
    /// delete): a crash between its landing and the host hearing of it
    /// leaves it on disk unacknowledged, like a write in flight.
    pub last_landed: Option<(String, Option<SessionRecord>)>,
    /// The automations' records, by key: durable when written (the sim
    /// does not fail or lose them).
    pub automations: BTreeMap<String, ahpd_core::automation::AutomationRecord>,
    next_id: u64,
    /// Counters.
    pub stats: StoreStats,
}

impl Store {
    /// Executes one `Effect::Store`.
    #[allow(clippy::too_many_arguments)]
    pub fn on_command(&mut self, q: &mut Queue, world: &mut SimRng, faults_rng: &mut SimRng, store_fail: f64, options: &Options, op: OpId, command: StoreCmd) {
        let (key, record, with_next) = match command {
            StoreCmd::Put { record, durability } => (record.key().into_owned(), Some(*record), durability == ahpd_core::Durability::WithNext),
            StoreCmd::Delete { key } => (key, None, false),
            StoreCmd::PutAutomation { record } => {
                let key = record.key().unwrap_or_default();
                self.automations.insert(key.clone(), *record);
                return self.answer_automation(q, world, options, op, key);
            }
            StoreCmd::DeleteAutomation { key } => {
                self.automations.remove(&key);
                return self.answer_automation(q, world, options, op, key);
            }
        };
        let fail = faults_rng.chance(store_fail);
        self.next_id += 1;
        let id = self.next_id;
        self.inflight.insert(id, Write { op, key: key.clone(), record, fail, automation: false, with_next });
        let delay = world.exp_ms(options.store_ms);
        q.push_lane(Lane::Store(key), delay, Event::StoreAck { id });
    }

    /// An automation's write: on disk now, answered later.
    fn answer_automation(&mut self, q: &mut Queue, world: &mut SimRng, options: &Options, op: OpId, key: String) {
        self.next_id += 1;
        let id = self.next_id;
        self.inflight.insert(id, Write { op, key: key.clone(), record: None, fail: false, automation: true, with_next: false });
        let delay = world.exp_ms(options.store_ms);
        q.push_lane(Lane::Store(key), delay, Event::StoreAck { id });
    }

    /// A write's answer is due: apply it (unless it fails) and answer.
    pub fn on_ack(&mut self, id: u64) -> Option<(Input, String)> {
        let write = self.inflight.remove(&id)?;
        let label = format!("store op{} {}", write.op.0, write.key);
        if write.automation {
            return Some((Input::Done { op: write.op, outcome: Outcome::Ok }, format!("{label} ok")));
        }
        if write.fail {
            self.stats.failed += 1;
            return Some((Input::Done { op: write.op, outcome: Outcome::Failed { message: "simulated disk error (EIO)".to_owned() } }, format!("{label} failed")));
        }
        self.stats.acked += 1;
        if write.with_next {
            if let Some(record) = write.record {
                self.stats.with_next += 1;
                self.volatile.push((write.key, record));
            }
            return Some((Input::Done { op: write.op, outcome: Outcome::Ok }, format!("{label} ok (durable with the next write)")));
        }
        // This write's fsync makes every volatile write before it durable.
        self.make_volatile_durable();
        self.last_landed = Some((write.key.clone(), write.record.clone()));
        match write.record {
            Some(record) => {
                self.durable.insert(write.key.clone(), record.clone());
                self.acked.insert(write.key, Acked::Put(Box::new(record)));
            }
            None => {
                self.durable.remove(&write.key);
                self.acked.insert(write.key, Acked::Delete);
            }
        }
        Some((Input::Done { op: write.op, outcome: Outcome::Ok }, format!("{label} ok")))
    }

    /// Whether some chat is held by two durable records: a move to another
    /// session between its two writes (docs/DECISIONS.md, 17).
    pub fn chat_in_two_records(&self) -> bool {
        let mut seen = std::collections::BTreeSet::new();
        self.durable.values().flat_map(|r| r.chats.iter()).any(|c| !seen.insert(&c.resource))
    }

    /// The host crashed: per key, a prefix of its unanswered writes (in
    /// issue order) reached the disk; the rest are lost.
    pub fn on_host_crash(&mut self, faults_rng: &mut SimRng) {
        let mut stopped: BTreeMap<String, bool> = BTreeMap::new();
        // Answered but not durable yet: the same coin, before the writes
        // still in flight (they were issued after).
        for (key, record) in std::mem::take(&mut self.volatile) {
            let stop = stopped.entry(key.clone()).or_insert(false);
            if *stop || !faults_rng.chance(0.5) {
                *stop = true;
                self.stats.with_next_lost += 1;
                continue;
            }
            self.durable.insert(key, record);
        }
        let writes = std::mem::take(&mut self.inflight);
        for (_, write) in writes.into_iter().filter(|(_, w)| !w.automation) {
            let stop = stopped.entry(write.key.clone()).or_insert(false);
            if *stop || write.fail || !faults_rng.chance(0.5) {
                *stop = true;
                self.stats.lost += 1;
                continue;
            }
            self.stats.durable_unacked += 1;
            match write.record {
                Some(record) => {
                    self.durable.insert(write.key, record);
                }
                None => {
                    self.durable.remove(&write.key);
                }
            }
        }
    }

    /// Whether a write (not an automation's) waits for its answer.
    pub fn writes_in_flight(&self) -> bool {
        self.inflight.values().any(|w| !w.automation)
    }

    /// The host stops gracefully: the store's stop makes every write it
    /// answered durable (the shell's journal checkpoint), the volatile ones
    /// included.
    pub fn on_graceful_stop(&mut self) {
        self.make_volatile_durable();
    }

    /// Every volatile write becomes durable, in order.
    fn make_volatile_durable(&mut self) {
        for (key, record) in std::mem::take(&mut self.volatile) {
            self.durable.insert(key.clone(), record.clone());
            self.acked.insert(key, Acked::Put(Box::new(record)));
        }
    }

    /// After the restart's checks: what is on disk is the baseline the next
    /// incarnation's acknowledgements build on.
    pub fn settle_after_crash(&mut self) {
        self.acked = self.durable.iter().map(|(k, r)| (k.clone(), Acked::Put(Box::new(r.clone())))).collect();
    }

    /// Unanswered writes per key, after the volatile ones (what may or
    /// may not reach the disk).
    pub fn unacked_by_key(&self) -> BTreeMap<String, Vec<Option<SessionRecord>>> {
        let mut out: BTreeMap<String, Vec<Option<SessionRecord>>> = BTreeMap::new();
        for (key, record) in &self.volatile {
            out.entry(key.clone()).or_default().push(Some(record.clone()));
        }
        for write in self.inflight.values().filter(|w| !w.automation) {
            out.entry(write.key.clone()).or_default().push(write.record.clone());
        }
        out
    }

    /// Every durable record, in key order: what `Host::new` gets back.
    pub fn records(&self) -> Vec<SessionRecord> {
        self.durable.values().cloned().collect()
    }
}
