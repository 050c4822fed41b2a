//! What the host and a session's own rules share, below both: the host's
//! part a session's rules may use while they run (`Shared`: the time, the
//! settings, the connections and fan-out, the op table and the effects
//! queue, the catalogue), and the types and names it is made of. Nothing
//! here imports `crate::host` or `crate::session`: the host
//! (`crate::host`) and a session's rules (`crate::session`) both build on
//! it, and the host re-exports what its own callers name.
//!
//! One job per file:
//! - this file: `Shared` itself, and its counters ([`Stats`]);
//! - `services`: the services on `Shared` every part uses (replies and
//!   notifications, fan-out, log lines, op ids, who a connection is, what
//!   each agent can do);
//! - `ops`: what each command in flight is for, by op id ([`Op`]);
//! - `conn`: one client connection as the host sees it ([`Conn`]), a
//!   handshake held for wakes ([`Handshake`]), and which sessions some
//!   connection watches (`Watched`);
//! - `chat_index`: the chat → session map ([`ChatIndex`]);
//! - `consts`: the fixed names and words both use (`_meta` keys, the root
//!   config key, the refusal of a turn while the host stops).

mod chat_index;
mod conn;
mod consts;
mod ops;
mod services;

use std::collections::{BTreeMap, BTreeSet};

use ahp_types::state::RootState;
use ahp_types::Uri;

use crate::config::Config;
use crate::effect::{ConnId, Effect, OpId};
use crate::rng::Rng;
use crate::time::{Now, WallTime};

pub use chat_index::ChatIndex;
pub use conn::{Conn, Handshake};
pub(crate) use conn::Watched;
pub use consts::{CHILDREN_META_KEY, PARENT_META_KEY, TOOL_META_KEY, WAKES_META_KEY};
pub(crate) use consts::{REFUSED_WHILE_STOPPING, SHOW_EXTERNAL};
pub use ops::{DetachedOp, GitOp, Op, TreeCut};

/// Counters the simulator and `/metrics` read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Sessions put to sleep after idle.
    pub sleeps: u64,
    /// Sessions evicted by the residency limit.
    pub evictions: u64,
    /// Wakes that succeeded.
    pub wakes: u64,
    /// Wakes whose resume failed.
    pub failed_resumes: u64,
    /// Completions for unknown or stale ops, ignored.
    pub stale_ops: u64,
    /// Backend events for unknown chats or finished turns, ignored.
    pub stale_events: u64,
    /// Client actions rejected.
    pub rejections: u64,
}

/// What one session's rules may use of the host while they run, besides
/// the session itself: nothing here is another session (see
/// [`Host`](crate::Host)).
#[derive(Debug, Clone)]
pub(crate) struct Shared {
    /// The settings.
    pub(crate) config: Config,
    /// The host's one random stream, seeded in `new`: turn ids for a
    /// chat's first message.
    pub(crate) rng: Rng,
    /// The time of the input being handled.
    pub(crate) now: Now,
    /// The last `serverSeq` stamped.
    pub(crate) server_seq: u64,
    /// The last op id given.
    pub(crate) next_op: u64,
    /// The LRU clock: taken when a session is used.
    pub(crate) lru_clock: u64,
    /// The root channel's state.
    pub(crate) root: RootState,
    /// Every connection, by id.
    pub(crate) conns: BTreeMap<ConnId, Conn>,
    /// Chat URI to its session's URI (the session table's own, shared,
    /// where the chat was listed with its session).
    pub(crate) chats: ChatIndex,
    /// The catalogue's order over announced sessions.
    pub(crate) catalogue: crate::catalogue::Index,
    /// Channels whose state this process ended (a session disposed or
    /// refused at creation, a chat disposed). Their subscriptions ended
    /// without a word on the channel, so a client may still hold the old
    /// state; `reconnect` answers a listed one with snapshots, never a
    /// replay onto that state (the URI may have been made anew since).
    pub(crate) retired: BTreeSet<Uri>,
    /// What each command in flight is for, by op id (`shared/ops.rs`).
    pub(crate) ops: BTreeMap<OpId, Op>,
    /// The last envelopes broadcast, for `reconnect` replays.
    pub(crate) replay: crate::replay::ReplayBuffer,
    /// The `recent` mode's cutoff, fixed when the first listing ran
    /// (`Some(None)`: fewer than two sessions of this host's own then).
    pub(crate) recent_cutoff: Option<Option<WallTime>>,
    /// Counters.
    pub(crate) stats: Stats,
    /// The effects of the input being handled, in order.
    pub(crate) effects: Vec<Effect>,
}
