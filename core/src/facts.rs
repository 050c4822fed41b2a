//! The facts of a session's life that reach past the session (issue 47:
//! "lifecycle facts, not feature calls"): its start answered, a wake ended,
//! a turn ended and written, the session disposed. The lifecycle code says
//! the fact once ([`Host::tell`](crate::Host)); the parts that take it —
//! automations, children, the wake index, git's checkpoints, the message
//! queue — are listed with their order in that one dispatch, so a new part
//! adds a line there and edits no other part's lifecycle.

use ahp_types::Uri;

use crate::record::SessionRecord;

/// One fact of a session's life, in the words the parts that take it need.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Fact<'a> {
    /// The agent of a session made for a client or a run answered its
    /// start: `refused` says why its creation failed, else it is live.
    StartAnswered {
        /// The session.
        session: &'a Uri,
        /// Why its creation was refused, if it was.
        refused: Option<&'a str>,
    },
    /// Every resume of a wake answered: `failed` says why it did not wake
    /// (it stays asleep), else it is live.
    WakeEnded {
        /// The session.
        session: &'a Uri,
        /// The backend's error, if the wake failed.
        failed: Option<&'a str>,
    },
    /// A turn of `chat` ended (completed, failed or cancelled), before the
    /// record that holds its end is written.
    TurnEnded {
        /// The session.
        session: &'a Uri,
        /// The chat whose turn ended.
        chat: &'a Uri,
    },
    /// A turn of `chat` cancelled at the end of a graceful stop's grace,
    /// before the record that holds its end is written (no automation
    /// follows it: the host is stopping).
    TurnCut {
        /// The session.
        session: &'a Uri,
        /// The chat whose turn was cancelled.
        chat: &'a Uri,
    },
    /// The record holding a turn's end was handed to the store.
    TurnWritten {
        /// The session.
        session: &'a Uri,
        /// Whether the turn earned a checkpoint (completed or failed for
        /// good: the Sessions page, "Isolation and worktrees").
        checkpoint: bool,
        /// Whether the session is a child whose finish the write numbered
        /// (its parent is told now).
        child_finished: bool,
    },
    /// The session was disposed and dropped; `record` is what it held.
    Disposed {
        /// The session.
        session: &'a Uri,
        /// Its record as it was at the end.
        record: &'a SessionRecord,
    },
    /// A dispose the store refused: the session is kept and is no longer
    /// being disposed. What waited on the dispose (a child's turn end its
    /// parent was not told while either was being disposed) is owed now.
    DisposeRefused {
        /// The session.
        session: &'a Uri,
    },
}

/// What the parts that heard a fact say back to the lifecycle that told it
/// (`Host::tell`), for what it does next.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Heard {
    /// A child's turn end was numbered into its record (`Fact::TurnEnded`,
    /// `Fact::TurnCut`): the record's write carries it, so it is made
    /// durable now, and its parent is told once it is handed to the store
    /// (`Fact::TurnWritten`).
    pub child_finished: bool,
}
