//! A session's own part of `disposeSession` (Sessions page, "The life of
//! a session"): it enters `Disposing` with the reply owed, its record
//! becomes a tombstone in the store first, then its conversations are
//! deleted; a store that refuses the tombstone leaves it whole and asleep.
//! The checks, its git refs and trees (which other sessions may share) and
//! forgetting it are the host's (`host/requests.rs`).

use std::collections::BTreeSet;

use ahp_types::Uri;

use crate::effect::{BackendCmd, ConnId, Durability, Effect, LogLevel, OpId, StoreCmd};
use crate::shared::{Op, Shared};
use crate::protocol::error::{error, INTERNAL_ERROR};
use crate::record::SessionRecord;
use crate::session::{Phase, Session};

impl Session {
    /// A checked dispose begins: the reply to request `id` of `conn` is
    /// owed, turns not yet handed over are dropped, and the record becomes
    /// a tombstone in the store ([`tombstone_of`]) so a backend copy that
    /// outlives the dispose is not listed again after a restart; the next
    /// pass over the backend's transcripts that finds none of it removes
    /// the tombstone. Nothing of the session (its conversations,
    /// checkpoints, tree) is removed before that write is durable: a store
    /// that fails leaves the session whole (issue 18, seed 99: a failed
    /// dispose had already deleted them).
    pub(crate) fn begin_dispose(&mut self, sh: &mut Shared, conn: ConnId, id: u64) {
        self.set_phase(Phase::disposing(conn, id));
        self.work.pending_sends.clear();
        let record = Box::new(tombstone_of(&self.record));
        let op = sh.new_op(Op::StoreDelete { session: self.record.resource.clone() });
        sh.effects.push(Effect::Store { op, command: StoreCmd::Put { record, durability: Durability::Now } });
        sh.log(LogLevel::Info, "session.disposing", Some(self.record.resource.clone()), String::new());
    }

    /// The tombstone is durable: every chat's conversation is deleted by
    /// the backend. Returns the deletes' ops, which the dispose waits for.
    pub(crate) fn delete_conversations(&mut self, sh: &mut Shared) -> BTreeSet<OpId> {
        let session = self.record.resource.clone();
        let chats: Vec<(Uri, String)> = self.record.chats.iter().map(|c| (c.resource.clone(), c.conversation_id.to_string())).collect();
        chats
            .into_iter()
            .map(|(chat, conversation_id)| self.backend(sh, Op::Delete { session: session.clone() }, chat, BackendCmd::Delete { conversation_id }))
            .collect()
    }

    /// The store refused the tombstone (`message`): the record is still on
    /// disk, so the session stays, asleep, and its disposer is told the
    /// dispose did not happen (-32603). Its conversations are untouched;
    /// its agents stop (a wake resumes them), so it sleeps with nothing in
    /// hand. Returns its running turns, which end in an error kept in its
    /// history. Nothing is done unless it is disposing.
    pub(crate) fn dispose_refused_by_store(&mut self, sh: &mut Shared, message: &str) -> Vec<(Uri, String)> {
        let (conn, id) = match &self.phase {
            Phase::Disposing(owed) => match owed.client() {
                Some(asker) => asker,
                None => return Vec::new(),
            },
            _ => return Vec::new(),
        };
        crate::mark!("dispose_store_failed_session_stays");
        sh.reply_error(conn, id, error(INTERNAL_ERROR, format!("the session store could not delete {}: {message}", self.record.resource)));
        let chats: Vec<Uri> = self.record.chats.iter().map(|c| c.resource.clone()).collect();
        for chat in chats {
            self.backend(sh, Op::Fire, chat, BackendCmd::Close);
        }
        let running = self.running_turns();
        self.work.busy_chats.clear();
        self.work.sends_in_flight.clear();
        // A turn a parked write let start during the dispose never reached
        // an agent; it fails with the running ones.
        self.work.pending_sends.clear();
        self.set_phase(Phase::Asleep);
        running
    }

    /// One of the dispose's deletes (op `op`) answered: true when it was
    /// the last the dispose waited for, and the dispose ends.
    pub(crate) fn dispose_step_done(&mut self, op: OpId) -> bool {
        match &mut self.phase {
            Phase::Disposing(owed) => {
                owed.ops.remove(&op);
                owed.ops.is_empty()
            }
            _ => false,
        }
    }
}

/// The tombstone a disposed session leaves in the store: what names its
/// backend's copy (provider, chats and their conversation ids) and nothing
/// of the host's own (title, bits, settings, owner, senders are gone).
pub fn tombstone_of(record: &SessionRecord) -> SessionRecord {
    SessionRecord {
        title: Box::default(),
        is_read: false,
        is_archived: false,
        config: Default::default(),
        owner: None,
        scope: None,
        changes: None,
        offer: None,
        in_tree: None,
        shared_trees: Default::default(),
        git: None,
        deleted: true,
        tools: None,
        chats: record
            .chats
            .iter()
            .map(|c| crate::record::ChatRecord { senders: Default::default(), changes: None, written: Default::default(), kept: Default::default(), draft: None, forgetting: Default::default(), seed: Default::default(), queued: Default::default(), steering: None, ..c.clone() })
            .collect(),
        ..record.clone()
    }
}
