//! What the host is doing with a session, and the legal moves between
//! (docs/STYLE.md 3.2: states say what they wait for; one function checks
//! every edge against this table).

use std::collections::{BTreeMap, BTreeSet};

use ahp_types::state::Turn;
use ahp_types::Uri;

use crate::effect::{ConnId, OpId};

/// What a wake has gathered from its resumes so far (Sessions page, "Sleep
/// and wake": "Wakers that arrive together share one resume"). It lives in
/// [`Phase::Waking`] and nowhere else: it means nothing once the wake ends.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Wake {
    /// Turns handed back by each chat's resume, by chat: the state is
    /// rebuilt from them when it was not held.
    pub history: BTreeMap<Uri, Vec<Turn>>,
    /// The first failure among the resumes: the whole wake fails with it
    /// and the session stays asleep.
    pub error: Option<String>,
    /// The starts the wake waits for (one per chat, and a chat made while
    /// it wakes): it ends when none is left.
    pub ops: BTreeSet<OpId>,
}

/// A session's host-side phase. The protocol's own `lifecycle`
/// (`creating`/`ready`/`failed`) lives in the session state; this is about
/// its agents. What a phase holds is boxed: every catalogue row holds a
/// phase, mostly `Asleep`, and inline its sets and owed reply made it 48
/// bytes (issue 21: memory per catalogue row).
#[derive(Debug, Clone, PartialEq)]
pub enum Phase {
    /// `createSession` was accepted and the agent is starting; the reply to
    /// the request [`Owed`] names is owed (Sessions page, "The life of a
    /// session": a refusal here is a session that never existed), and
    /// [`Owed::ops`] holds the default chat's agent start it waits for.
    Starting(Box<Owed>),
    /// Its agents run.
    Live {
        /// Chat agents starting in it (a chat made while live, an agent
        /// owed a fresh start): their answers name the conversations a
        /// later wake resumes, so they are work in hand.
        starting: Box<BTreeSet<OpId>>,
    },
    /// Its agents were let go; the conversation is kept (Sessions page,
    /// "Sleep and wake"). Its state may still be held, or evicted.
    Asleep,
    /// Its agents are resuming; wakers wait in `crate::session::Work::waiters` (they
    /// may come before the wake can start: an archived tree restoring), and
    /// what the resumes answered gathers here.
    Waking(Box<Wake>),
    /// `disposeSession` runs; the reply to the request [`Owed`] names is
    /// owed, and [`Owed::ops`] holds the deletes (conversations, git refs and trees)
    /// it waits for, once its tombstone is durable: it ends when none is
    /// left.
    Disposing(Box<Owed>),
}

/// The reply a phase owes and what it waits for ([`Phase::Starting`],
/// [`Phase::Disposing`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Owed {
    /// Who is owed the answer.
    pub asker: Asker,
    /// The ops it waits for.
    pub ops: BTreeSet<OpId>,
}

/// Who a phase owes its answer to ([`Owed::asker`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asker {
    /// A client's request: `createSession` or `disposeSession`.
    Client {
        /// The connection.
        conn: ConnId,
        /// Its request id.
        id: u64,
    },
    /// An agent's `start_child_session` (issue 24; docs/DECISIONS.md,
    /// 24): the session is its child, and the tool call is answered once
    /// it starts (or refused when it would not).
    Tool(crate::tools::HostCallId),
}

impl Owed {
    /// The client request owed the answer, when a client asked.
    pub fn client(&self) -> Option<(ConnId, u64)> {
        match self.asker {
            Asker::Client { conn, id } => Some((conn, id)),
            Asker::Tool(_) => None,
        }
    }
}

impl Phase {
    /// A wake just begun: nothing answered yet.
    pub fn waking() -> Phase {
        Phase::Waking(Box::default())
    }

    /// Live with no chat's agent starting.
    pub fn live() -> Phase {
        Phase::Live { starting: Box::default() }
    }

    /// Creating, the reply to request `id` of `conn` owed, no start asked
    /// yet.
    pub fn starting(conn: ConnId, id: u64) -> Phase {
        Phase::starting_for(Asker::Client { conn, id })
    }

    /// Creating, the answer owed to `asker`, no start asked yet.
    pub fn starting_for(asker: Asker) -> Phase {
        Phase::Starting(Box::new(Owed { asker, ops: BTreeSet::new() }))
    }

    /// Disposing, the reply to request `id` of `conn` owed, no delete asked
    /// yet.
    pub fn disposing(conn: ConnId, id: u64) -> Phase {
        Phase::Disposing(Box::new(Owed { asker: Asker::Client { conn, id }, ops: BTreeSet::new() }))
    }

    /// Whether its agents run.
    pub fn is_live(&self) -> bool {
        matches!(self, Phase::Live { .. })
    }

    /// The ops this phase waits for (`None` asleep, which waits for
    /// nothing): what a phase's completions are checked against.
    pub fn awaited(&self) -> Option<&BTreeSet<OpId>> {
        match self {
            Phase::Starting(owed) | Phase::Disposing(owed) => Some(&owed.ops),
            Phase::Live { starting } => Some(&**starting),
            Phase::Waking(wake) => Some(&wake.ops),
            Phase::Asleep => None,
        }
    }

    /// [`Phase::awaited`], to add or take an op.
    pub fn awaited_mut(&mut self) -> Option<&mut BTreeSet<OpId>> {
        match self {
            Phase::Starting(owed) | Phase::Disposing(owed) => Some(&mut owed.ops),
            Phase::Live { starting } => Some(&mut **starting),
            Phase::Waking(wake) => Some(&mut wake.ops),
            Phase::Asleep => None,
        }
    }

    /// The phase without what it gathered or waits for: where it is, and
    /// whom a reply is owed to. Two phases with equal shallow copies are
    /// the same phase (answers coming in do not move it).
    pub fn shallow(&self) -> Phase {
        match self {
            Phase::Starting(owed) => Phase::starting_for(owed.asker),
            Phase::Live { .. } => Phase::live(),
            Phase::Asleep => Phase::Asleep,
            Phase::Waking(_) => Phase::waking(),
            Phase::Disposing(owed) => Phase::Disposing(Box::new(Owed { asker: owed.asker, ops: BTreeSet::new() })),
        }
    }

    /// Whether a wake runs.
    pub fn is_waking(&self) -> bool {
        matches!(self, Phase::Waking(_))
    }

    /// A short name for traces and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Phase::Starting(_) => "starting",
            Phase::Live { .. } => "live",
            Phase::Asleep => "asleep",
            Phase::Waking(_) => "waking",
            Phase::Disposing(_) => "disposing",
        }
    }
}

/// Whether `from -> to` is a legal move. Leaving the table (removal) is
/// legal from `Starting` (a refused creation) and `Disposing` only, and is
/// not a `Phase`.
pub fn is_legal(from: &Phase, to: &Phase) -> bool {
    use Phase::*;
    matches!(
        (from, to),
        (Starting { .. }, Live { .. })
            | (Live { .. }, Asleep)
            | (Live { .. }, Disposing { .. })
            // Its agents start again in its new root (its tree, made on
            // its first send), the turn held meanwhile.
            | (Live { .. }, Waking(_))
            | (Asleep, Waking(_))
            | (Asleep, Disposing { .. })
            | (Waking(_), Live { .. })
            | (Waking(_), Asleep)
            | (Waking(_), Disposing { .. })
            // The store could not drop the record: the dispose did not
            // happen and the session stays, asleep.
            | (Disposing { .. }, Asleep)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_allows_the_documented_moves_only() {
        let c = ConnId(1);
        assert!(is_legal(&Phase::live(), &Phase::Asleep));
        assert!(is_legal(&Phase::Asleep, &Phase::waking()));
        assert!(is_legal(&Phase::waking(), &Phase::Asleep));
        assert!(!is_legal(&Phase::Asleep, &Phase::live()));
        assert!(is_legal(&Phase::live(), &Phase::waking()), "agents restarted in a new tree");
        assert!(!is_legal(&Phase::disposing(c, 1), &Phase::live()));
        assert!(!is_legal(&Phase::live(), &Phase::starting(c, 1)));
    }
}

impl crate::session::Session {
    /// Moves this session to `to` through the legal-transition table
    /// ([`is_legal`]; a move it does not list is a bug, caught in debug
    /// builds and by the simulator).
    pub fn set_phase(&mut self, to: Phase) {
        debug_assert!(is_legal(&self.phase, &to), "illegal phase move {} -> {} for {}", self.phase.name(), to.name(), self.record.resource);
        self.phase = to;
    }
}
