//! What the host is doing with a session, and the legal moves between
//! (docs/STYLE.md 3.2: states say what they wait for; one function checks
//! every edge against this table).

use crate::effect::ConnId;

/// A session's host-side phase. The protocol's own `lifecycle`
/// (`creating`/`ready`/`failed`) lives in the session state; this is about
/// its agents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// `createSession` was accepted and the agent is starting; the reply to
    /// request `id` on `conn` is owed (Sessions page, "The life of a
    /// session": a refusal here is a session that never existed).
    Starting {
        /// The creating connection.
        conn: ConnId,
        /// Its request id.
        id: u64,
    },
    /// Its agents run.
    Live,
    /// Its agents were let go; the conversation is kept (Sessions page,
    /// "Sleep and wake"). Its state may still be held, or evicted.
    Asleep,
    /// Its agents are resuming; wakers wait in `Session::waiters`.
    Waking,
    /// `disposeSession` runs; the reply to request `id` on `conn` is owed.
    Disposing {
        /// The disposing connection.
        conn: ConnId,
        /// Its request id.
        id: u64,
    },
}

impl Phase {
    /// A short name for traces and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Phase::Starting { .. } => "starting",
            Phase::Live => "live",
            Phase::Asleep => "asleep",
            Phase::Waking => "waking",
            Phase::Disposing { .. } => "disposing",
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
        (Starting { .. }, Live)
            | (Live, Asleep)
            | (Live, Disposing { .. })
            // Its agents start again in its new root (its tree, made on
            // its first send), the turn held meanwhile.
            | (Live, Waking)
            | (Asleep, Waking)
            | (Asleep, Disposing { .. })
            | (Waking, Live)
            | (Waking, Asleep)
            | (Waking, Disposing { .. })
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
        assert!(is_legal(&Phase::Live, &Phase::Asleep));
        assert!(is_legal(&Phase::Asleep, &Phase::Waking));
        assert!(is_legal(&Phase::Waking, &Phase::Asleep));
        assert!(!is_legal(&Phase::Asleep, &Phase::Live));
        assert!(is_legal(&Phase::Live, &Phase::Waking), "agents restarted in a new tree");
        assert!(!is_legal(&Phase::Disposing { conn: c, id: 1 }, &Phase::Live));
        assert!(!is_legal(&Phase::Live, &Phase::Starting { conn: c, id: 1 }));
    }
}
