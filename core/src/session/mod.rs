//! One session as the host holds it: its durable record, the protocol state
//! it holds in memory while resident, its agents, and what waits on it.

pub mod actions;
pub mod agents;
pub mod activity;
pub mod changes;
pub mod chat_flags;
pub mod chats;
pub mod damage;
pub mod dispose;
pub mod effects;
pub mod fork;
pub mod git;
pub mod handle;
pub mod in_hand;
pub mod lifecycle;
pub mod moves;
pub mod mirror;
pub mod rewind;
pub mod resume;
pub mod pending;
pub mod questions;
pub mod row;
pub mod sleep;
pub mod steering;
pub mod starts;
pub mod state;
pub mod table;
pub mod turns;
pub mod wake;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use ahp_types::actions::StateAction;
use ahp_types::state::{ChatState, Message, SessionState, SessionSummary};
use ahp_types::Uri;

use crate::continuation::{QueuedCommand, WaitingRequest};
use crate::effect::{ConnId, OpId};
use crate::record::SessionRecord;
use crate::time::{MonoTime, WallTime};

pub use lifecycle::{Asker, Phase, Wake};

/// The protocol state of a resident session: exactly what clients hold,
/// advanced only by the `ahp` reducers over the envelopes the host
/// broadcasts.
#[derive(Debug, Clone, PartialEq)]
pub struct Resident {
    /// The session channel's state.
    pub session: SessionState,
    /// Each chat channel's state, by chat URI.
    pub chats: BTreeMap<Uri, ChatState>,
    /// Monotonic start time of each chat's running turn, for durations.
    pub turn_started_mono: BTreeMap<Uri, MonoTime>,
    /// The `serverSeq` when this state was made (a new session, or one
    /// rebuilt from its backend after an eviction). A client that last
    /// heard from the host at or before it holds an older state of the same
    /// URI, which no replay can bring up to date.
    pub born_seq: u64,
}

/// Something that asked for a session while it was waking, answered when
/// the wake ends (Sessions page, "Sleep and wake": "Wakers that arrive
/// together share one resume").
#[derive(Debug, Clone, PartialEq)]
pub enum Waiter {
    /// A `subscribe`, `fetchTurns` or `createChat` request to answer.
    Request {
        /// The connection.
        conn: ConnId,
        /// The request id.
        id: u64,
        /// The request, decoded and checked when it came; it runs on from
        /// there when the wake ends.
        request: WaitingRequest,
    },
    /// A client-dispatched action to apply once the session is live.
    Action(QueuedAction),
    /// An `initialize` or `reconnect` naming this session among its
    /// channels, answered once every session it waits for has woken or
    /// failed to (`host/connections.rs`).
    Handshake {
        /// The connection.
        conn: ConnId,
        /// The request id.
        id: u64,
    },
}

/// A client-dispatched action waiting for its turn on a session.
#[derive(Debug, Clone, PartialEq)]
pub struct QueuedAction {
    /// Who sent it.
    pub conn: ConnId,
    /// The channel it was dispatched on.
    pub channel: Uri,
    /// The client's sequence number for the echo's origin.
    pub client_seq: i64,
    /// The action.
    pub action: StateAction,
}

/// A client action or command whose store write is in flight: applied,
/// echoed and answered only when the write is durable (docs/DECISIONS.md, 2).
#[derive(Debug, Clone, PartialEq)]
pub struct Parked {
    /// The store write.
    pub op: OpId,
    /// What to do once durable.
    pub work: ParkedWork,
    /// A started turn's message as the written record keeps it, shared
    /// again when the action applies (one copy of a message per turn,
    /// however big; issue 25).
    pub kept: Option<std::sync::Arc<Message>>,
}

/// What a parked store write is for.
#[derive(Debug, Clone, PartialEq)]
pub enum ParkedWork {
    /// Apply and echo a client action.
    Action(QueuedAction),
    /// Add a chat (`createChat`) and answer request `id` on `conn`.
    CreateChat {
        /// The connection.
        conn: ConnId,
        /// The request id.
        id: u64,
        /// The chat's record.
        chat: Box<crate::record::ChatRecord>,
        /// A first message to start the chat with.
        initial_message: Option<Box<Message>>,
    },
    /// Start `chat`'s queued message `queued_id` as turn `turn_id`
    /// (`crate::session::pending`): the record already takes it off the
    /// queue and names the turn's sender.
    StartQueued {
        /// The chat.
        chat: Uri,
        /// The turn it runs as.
        turn_id: String,
        /// The queued message's id.
        queued_id: String,
    },
    /// Remove a chat (`disposeChat`) and answer request `id` on `conn`.
    DisposeChat {
        /// The connection.
        conn: ConnId,
        /// The request id.
        id: u64,
        /// The chat's URI.
        chat: Uri,
    },
    /// Put `chat` of this session after `after` (first when `None`) in
    /// its order (`moveChat` within one session, `session/moves.rs`) and
    /// answer request `id` on `conn`.
    Reorder {
        /// The connection.
        conn: ConnId,
        /// The request id.
        id: u64,
        /// The chat moved.
        chat: Uri,
        /// The chat it goes after, if any.
        after: Option<Uri>,
    },
    /// The first of a move's two writes (`moveChat` to another session,
    /// docs/DECISIONS.md, 17): this session's record with chat `chat`
    /// (under its next move generation), from session `source`.
    MoveIn(Box<MoveWork>),
    /// The second of a move's two writes: this session's record without
    /// the chat, once the destination's record holds it.
    MoveOut(Box<MoveWork>),
    /// A session a move holds while the other session's write is in flight:
    /// nothing it queues runs, it does not sleep, and it is not disposed,
    /// until the move ends. Its `op` is the other session's write, never
    /// this session's, so no completion of this session's matches it.
    MoveHold,
}

/// A cross-session move in flight ([`ParkedWork::MoveIn`],
/// [`ParkedWork::MoveOut`]).
#[derive(Debug, Clone, PartialEq)]
pub struct MoveWork {
    /// The connection that asked.
    pub conn: ConnId,
    /// Its request id.
    pub id: u64,
    /// The chat's record as the destination's write carries it.
    pub chat: crate::record::ChatRecord,
    /// The destination's chat it goes after, if any.
    pub after: Option<Uri>,
    /// The session it leaves.
    pub source: Uri,
    /// The session it goes to.
    pub destination: Uri,
}

/// Work queued on a session behind a parked write, in arrival order.
#[derive(Debug, Clone, PartialEq)]
pub enum Queued {
    /// A client action.
    Action(QueuedAction),
    /// A command to run on once the session is free.
    Command {
        /// The connection.
        conn: ConnId,
        /// The request id.
        id: u64,
        /// The command, decoded and checked when it came.
        command: QueuedCommand,
    },
}

/// Whether root subscribers were told of a session, and what they hold:
/// a view of [`Session`]'s announcement, read through
/// [`Session::announcement`]. An announced session always has its row on
/// record (its next change is diffed against it) and a provisional one has
/// none. The session keeps it as a kept row and a flag beside its other
/// flags, not as this enum: with two states that hold no row beside one
/// that does, the enum took 16 bytes of every catalogue row's `Session`
/// where the row's pointer takes 8 (issue 21: memory per catalogue row).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Announcement<'a> {
    /// Nothing said yet: not listed, no `root/sessionAdded` (Sessions page,
    /// "Provisional sessions").
    Provisional,
    /// Announced; the row last sent to root subscribers, for
    /// `root/sessionSummaryChanged` deltas.
    Announced(&'a SessionSummary),
    /// Announced, and what root subscribers hold is exactly the row
    /// [`Session::summary`] builds now, so it is not kept (issue 21: the
    /// kept row was ~1 KB of a catalogue row's memory). Only a session whose
    /// state is not held is settled. A session can change only once the
    /// session table hands it out to change, and the table makes the row
    /// explicit (`Announced`) before it does ([`Session::unsettle`]); the
    /// host settles again the sessions an input touched whose sent row is
    /// still the one they build ([`Session::settle`]).
    Settled,
}

/// What a session has in hand while it works, apart from its record and
/// state: kept out of line ([`WorkSlot`]) because a catalogue row that is
/// quiet has none of it, and inline it was ~250 bytes of every row's
/// `Session` (issue 21: memory per catalogue row).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Work {
    /// The chats whose agent reported background work (an ACP terminal
    /// still running) and has not reported its end.
    pub busy_chats: BTreeSet<Uri>,
    /// Chats whose agent exited in a session whose backend cannot resume:
    /// the session stays live and each such chat's agent is started afresh
    /// (a new conversation) before its next send.
    pub agents_owed: BTreeSet<Uri>,
    /// Backend `Send` ops not yet acknowledged, by op: (chat, turn id).
    pub sends_in_flight: BTreeMap<OpId, (Uri, String)>,
    /// Turns accepted while the agent was not running, handed to it once
    /// the wake ends: (chat, turn id, message).
    pub pending_sends: Vec<(Uri, String, std::sync::Arc<Message>)>,
    /// Every chat start not answered yet, by op, whatever the phase does
    /// meanwhile: a late answer still names the conversation an agent
    /// assigned, which the next wake must resume (`Session::start_answered`).
    pub starts_unanswered: BTreeMap<OpId, Uri>,
    /// Requests and actions waiting for a wake.
    pub waiters: Vec<Waiter>,
    /// A client action waiting for its store write.
    pub parked: Option<Box<Parked>>,
    /// A record write held back while `parked` is in flight: the in-memory
    /// record lacks the parked change until it is durable, so writing it
    /// then would land after the parked write and undo it on disk. It is
    /// written once the parked write settles.
    pub put_owed: bool,
    /// Client actions and commands queued behind the parked one, in
    /// arrival order.
    pub inbox: VecDeque<Queued>,
    /// A git command of this session in flight (its first send's tree and
    /// `turn/0`, or a checkpoint): work in hand.
    pub git_ops: BTreeSet<OpId>,
    /// The first send's git command (tree and `turn/0`) in flight; turns
    /// wait in `pending_sends` until it answers.
    pub git_begin: Option<OpId>,
    /// The checkpoint command, by op (ops are issued in increasing order),
    /// whose change counts were applied last in this process: one issued
    /// earlier and answered later is not applied.
    pub counted_checkpoint: Option<OpId>,
    /// A queued start the store refused (issue 23): tried again at this
    /// time, not at once, so a store that keeps failing (a full disk) is
    /// not written without end ([`Session::finish_queued_start`]).
    pub queue_retry_at: Option<crate::time::MonoTime>,
    /// Queued starts the store refused in a row: the wait before the next
    /// try doubles with each ([`queue_retry_wait_ms`]).
    pub queue_refusals: u32,
    /// Chats whose conversation a start's answer named (the id the agent
    /// keeps it under, and that it began) after the record was last
    /// written: no turn goes to such a chat's agent until a write carrying
    /// the name is durable ([`Session::hand_to_agent`]; docs/DECISIONS.md,
    /// 8). A restart that read the older record would resume another
    /// conversation, or start this one afresh over the agent's history.
    pub conversations_unsaved: BTreeSet<Uri>,
    /// The record writes ([`crate::effect::Durability::Now`]) in flight
    /// that carry such names, by op: the chats each makes durable
    /// ([`Session::conversation_written`]).
    pub conversation_writes: BTreeMap<OpId, BTreeSet<Uri>>,
    /// The held state of chats moved in (`moveChat`) while this session's
    /// state was not held, by chat: its next wake holds them as they were,
    /// where it rebuilds its other chats from the backend's history. A
    /// client watching a moved chat holds that state, not the backend's
    /// (which lacks the host's own parts of it, a turn's duration among
    /// them): sim seeds 5821 and 14715 of the 100k run at d163ccb.
    pub moved_in: BTreeMap<Uri, ChatState>,
}

/// The wait (ms) before a queued start is tried again after the store
/// refused `refusals` in a row: 1 s, doubling, at most a minute.
pub fn queue_retry_wait_ms(refusals: u32) -> u64 {
    1_000u64.saturating_mul(1u64 << refusals.saturating_sub(1).min(6)).min(60_000)
}

impl Work {
    /// Nothing in hand: what a quiet session reads.
    pub const EMPTY: Work = Work {
        busy_chats: BTreeSet::new(),
        agents_owed: BTreeSet::new(),
        sends_in_flight: BTreeMap::new(),
        pending_sends: Vec::new(),
        starts_unanswered: BTreeMap::new(),
        waiters: Vec::new(),
        parked: None,
        put_owed: false,
        inbox: VecDeque::new(),
        git_ops: BTreeSet::new(),
        git_begin: None,
        counted_checkpoint: None,
        queue_retry_at: None,
        queue_refusals: 0,
        conversations_unsaved: BTreeSet::new(),
        conversation_writes: BTreeMap::new(),
        moved_in: BTreeMap::new(),
    };
}

/// A session's [`Work`], allocated only while it holds something. Reads
/// through it see [`Work::EMPTY`] when none is allocated; a write (any
/// `&mut` use) allocates it; [`Session::settle`] drops it again once the
/// input that used it leaves it empty. Equal whether allocated or not when
/// what it holds is equal.
#[derive(Clone, Default)]
pub struct WorkSlot(Option<Box<Work>>);

impl WorkSlot {
    /// Gives the allocation back when it holds nothing.
    pub fn shed(&mut self) {
        if self.0.as_deref().is_some_and(|w| *w == Work::EMPTY) {
            self.0 = None;
        }
    }
}

impl std::ops::Deref for WorkSlot {
    type Target = Work;

    fn deref(&self) -> &Work {
        static EMPTY: Work = Work::EMPTY;
        self.0.as_deref().unwrap_or(&EMPTY)
    }
}

impl std::ops::DerefMut for WorkSlot {
    fn deref_mut(&mut self) -> &mut Work {
        self.0.get_or_insert_with(Box::default)
    }
}

impl PartialEq for WorkSlot {
    fn eq(&self, other: &WorkSlot) -> bool {
        **self == **other
    }
}

impl std::fmt::Debug for WorkSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

/// One session the host knows: listed in the catalogue, resident or not.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    /// The durable record (host-owned fields); the catalogue row is built
    /// from it when the session is not resident.
    pub(in crate::session) record: SessionRecord,
    /// `modifiedAt` as a number; only moves forward.
    pub(in crate::session) modified_at: WallTime,
    /// The row root subscribers hold, when kept: `None` while provisional
    /// or settled ([`Session::announcement`] tells which).
    sent_row: Option<Box<SessionSummary>>,
    /// Provisional until its first turn, then announced (Sessions page,
    /// "Provisional sessions"); with `sent_row`, the [`Announcement`].
    announced: bool,
    /// Whether its creation failed and its start is owed to the next send.
    pub(in crate::session) start_owed: bool,
    /// What the host is doing with it.
    pub(in crate::session) phase: Phase,
    /// The protocol state, while resident (boxed: a catalogue row that is
    /// not resident pays one pointer for it).
    pub(in crate::session) resident: Option<Box<Resident>>,
    /// Whether its backend can resume it (else it never sleeps).
    pub(in crate::session) can_resume: bool,
    /// Last monotonic time an action moved in it (idle timer).
    pub(in crate::session) last_activity: MonoTime,
    /// LRU stamp: a host-wide counter taken when it was last used.
    pub(in crate::session) last_used: u64,
    /// What it has in hand while it works (agents, sends, waiters, parked
    /// writes, git commands): nothing is allocated for a quiet session
    /// ([`WorkSlot`]).
    pub(in crate::session) work: WorkSlot,
}

impl Session {
    /// The durable record (host-owned fields of the catalogue row).
    pub fn record(&self) -> &SessionRecord {
        &self.record
    }

    /// `modifiedAt` as a number; only moves forward.
    pub fn modified_at(&self) -> WallTime {
        self.modified_at
    }

    /// Whether its creation failed and its start is owed to the next send.
    pub fn start_owed(&self) -> bool {
        self.start_owed
    }

    /// What the host is doing with it.
    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// Whether its agents were let go ([`Phase::Asleep`]).
    pub fn is_asleep(&self) -> bool {
        self.phase == Phase::Asleep
    }

    /// The protocol state, while resident.
    pub fn resident(&self) -> Option<&Resident> {
        self.resident.as_deref()
    }

    /// Whether its backend can resume it (else it never sleeps).
    pub fn can_resume(&self) -> bool {
        self.can_resume
    }

    /// Last monotonic time an action moved in it (idle timer).
    pub fn last_activity(&self) -> MonoTime {
        self.last_activity
    }

    /// LRU stamp: a host-wide counter taken when it was last used.
    pub fn last_used(&self) -> u64 {
        self.last_used
    }

    /// What it has in hand while it works ([`Work::EMPTY`] when quiet).
    pub fn work(&self) -> &Work {
        &self.work
    }
}

impl Session {
    /// Marks the session announced and records `summary` as the row every
    /// root subscriber now holds (from `root/sessionAdded`; a row listed
    /// from the store's records after a restart starts `Settled` instead).
    /// The two go together: an announced session with no row on record
    /// would have its next change diffed against nothing, and never
    /// broadcast.
    pub fn mark_announced(&mut self, summary: SessionSummary) {
        self.announced = true;
        self.sent_row = Some(Box::new(summary));
    }

    /// Marks the session announced with the row it builds now as the one
    /// root subscribers hold (`Settled`): a row listed from the store's
    /// records after a restart, which a client's listing holds as built.
    pub fn mark_settled(&mut self) {
        self.announced = true;
        self.sent_row = None;
    }

    /// Whether root subscribers were told of the session, and what they
    /// hold.
    pub fn announcement(&self) -> Announcement<'_> {
        match (self.announced, self.sent_row.as_deref()) {
            (false, _) => Announcement::Provisional,
            (true, Some(row)) => Announcement::Announced(row),
            (true, None) => Announcement::Settled,
        }
    }

    /// `createdAt` as a number: the record's, read from its [`crate::record::Stamp`]
    /// (the epoch when the stored text is no time); never moves. Not kept
    /// beside the record (issue 21: 8 bytes of every catalogue row).
    pub fn created_at(&self) -> WallTime {
        self.record.created_at.time().unwrap_or_default()
    }

    /// Background work the backend reported (`Session.busy()`): some
    /// chat's agent has some (Sessions page, "Sleep and wake": no sleep
    /// while a chat has background work).
    pub fn is_busy(&self) -> bool {
        !self.work.busy_chats.is_empty()
    }

    /// Whether `root/sessionAdded` was sent: false while provisional
    /// (Sessions page, "Provisional sessions": a session is not listed and
    /// not counted against the residency limit until its first turn).
    pub fn is_announced(&self) -> bool {
        self.announced
    }

    /// Records `summary` as the row every root subscriber now holds and
    /// returns the one they held before, or `None` (nothing recorded) while
    /// the session is provisional. A settled session is never here: the
    /// table made its row explicit when it handed the session out to
    /// change ([`Session::unsettle`]). Were one here anyway, the row it
    /// held is gone; the core does not panic, so it answers as if nothing
    /// moved, and the simulator's `root_rows_match_listing` would see the
    /// client rows drift.
    pub fn replace_sent_row(&mut self, summary: SessionSummary) -> Option<Box<SessionSummary>> {
        if !self.announced {
            return None;
        }
        match &mut self.sent_row {
            Some(row) => Some(std::mem::replace(row, Box::new(summary))),
            None => {
                let old = Box::new(summary.clone());
                self.sent_row = Some(Box::new(summary));
                Some(old)
            }
        }
    }

    /// Makes a settled session's sent row explicit (`Announced`), built as
    /// root subscribers hold it: the session table calls it as it hands the
    /// session out to change, before any change, so the next
    /// `root/sessionSummaryChanged` is diffed against exactly the row sent.
    pub fn unsettle(&mut self) {
        if self.announced && self.sent_row.is_none() {
            self.sent_row = Some(Box::new(self.summary()));
        }
    }

    /// Drops the kept sent row of a session whose state is not held when it
    /// is exactly the row the session builds now (`Settled`), and its
    /// [`Work`] when that holds nothing; the host calls it on every session
    /// an input touched, once the input is done.
    pub fn settle(&mut self) {
        self.work.shed();
        if self.resident.is_some() {
            return;
        }
        if let Some(row) = &self.sent_row {
            if **row == self.summary() {
                self.sent_row = None;
            }
        }
    }

    /// Moves `modifiedAt` to `to` when that is later, never back (Sessions
    /// page, "The state a session reports": "modifiedAt is the last change
    /// ... so it moves forward only and a chat closed or moved away takes
    /// nothing back with it"; a wall clock that jumps backwards is clamped
    /// here). The record's text follows. Returns the value before, so the
    /// caller can move the catalogue row. The one place `modified_at`
    /// moves after [`Session::new`].
    pub fn advance_modified_at(&mut self, to: WallTime) -> WallTime {
        let was = self.modified_at;
        if to < was {
            crate::mark!("modified_at_clamped");
        }
        self.modified_at = was.max(to);
        self.record.modified_at = crate::record::Stamp::at(self.modified_at);
        was
    }

    /// A session the host knows from `record`, in `phase`, with no work in
    /// hand and nothing waiting. `created_at`/`modified_at` are read from
    /// the record (a `modifiedAt` before `createdAt` is raised to it).
    /// The record's URI must be valid (`crate::ids::ResourceId::parse`): the session
    /// keeps it only as `record.resource` (issue 21: a parsed copy per
    /// catalogue row cost ~110 bytes).
    pub fn new(mut record: SessionRecord, phase: Phase, resident: Option<Resident>, can_resume: bool, now: MonoTime) -> Session {
        record.compact();
        let created_at = record.created_at.time().unwrap_or_default();
        let modified_at = record.modified_at.time().unwrap_or(created_at).max(created_at);
        Session {
            record,
            modified_at,
            sent_row: None,
            announced: false,
            start_owed: false,
            phase,
            resident: resident.map(Box::new),
            can_resume,
            last_activity: now,
            last_used: 0,
            work: WorkSlot::default(),
        }
    }
}
