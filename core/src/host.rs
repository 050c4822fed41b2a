//! The host: one deterministic state machine for every session, chat and
//! connection (design card: sans-IO core).
//!
//! `handle(now, input)` applies one input and returns the effects to run;
//! `next_deadline()` says when to call again with `Input::Tick`. This file
//! holds the host's state, its construction (also the restart path), and
//! the routing: each input to its handler, each completion to the owner
//! its op names (`crate::shared::Op`). Handlers live in submodules, one
//! job each.
//!
//! The host's own work lives in these files, each one job, each an
//! `impl Host` that sequences a session's own rules (`impl Session` in
//! `crate::session`, taking the `Shared` part of the host) with what
//! reaches past one session:
//! - `connections`: admission, frame credit, `initialize`, `reconnect`,
//!   `authenticate`, `subscribe`, `unsubscribe`, disconnects, and a
//!   handshake held for the wakes of the sessions it names.
//! - `requests`: what clients ask of sessions: `createSession`,
//!   `disposeSession`, `listSessions`, `fetchTurns`, `createChat`,
//!   `disposeChat`, `resolveSessionConfig`, `moveChat` (the two sessions'
//!   writes in their order), and client-dispatched actions (write-ahead:
//!   validate, make durable, apply, stamp `serverSeq`, echo).
//! - `agents`: what a session's backend answers and says and a turn's life
//!   around it; sleep after idle, the residency limit, waking; a graceful
//!   stop; when a chat's queued message starts (the session decides).
//!
//! Parts with their own state take a view of what they may reach, not the
//! host: `awareness` (workspace awareness: `awareness::Aware`),
//! `detached` (the window's own trees: `detached::Window`), `git` (config
//! resolution, worktrees, checkpoints, a tree's life through archive,
//! dispose and wake: `git::Trees`, whose outs `Host::apply_trees` applies),
//! `automations` (`automations::Auto`, whose outs `Host::apply_automation`
//! applies), `tools` with `children` (the host tools and child sessions:
//! `tools::Tools`, whose outs `Host::apply_tools` applies) and `discovery`
//! (passes over the backends' transcripts, external sessions:
//! `discovery::Finder`, whose outs, `discovery::Found`, `Host::apply_found`
//! applies). The rest of the
//! files here are the host's own rules, each one job: `timers` (the timer table:
//! every timed kind's deadline and fire, walked in one order by `handle`
//! and `next_deadline`). Below both the host and a
//! session's rules, `crate::shared` holds the services every part uses
//! (`Shared`), what each command in flight is for (`Op`), a connection as
//! the host sees it (`Conn`) and the names both use; this module re-exports
//! what its callers name. This file: the state, its construction (also the
//! restart path), the routing of each input and completion to its owner,
//! fan-out and the catalogue's announcements.

mod agents;
mod automations;
mod awareness;
mod children;
mod connections;
mod detached;
mod discovery;
mod git;
mod requests;
mod timers;
mod tools;

use std::collections::{BTreeMap, BTreeSet};
use ahp_types::actions::{ActionOrigin, RootActiveSessionsChangedAction, StateAction};
use ahp_types::state::{AgentInfo, RootState};
use ahp_types::{ROOT_RESOURCE_URI, Uri};
use ahp::reducers::{ReduceOutcome, apply_action_to_root};
pub use connections::{HANDSHAKE_QUEUE_MAX_BYTES, RATE_CLOSE_AFTER_MS, RATE_LOG_INTERVAL_MS};
pub use crate::shared::{Conn, DetachedOp, GitOp, Handshake, Op, Stats, TreeCut};
pub use crate::shared::{CHILDREN_META_KEY, PARENT_META_KEY, TOOL_META_KEY, WAKES_META_KEY};
pub(crate) use crate::shared::Shared;
pub use automations::{capabilities as automation_capabilities, AUTOMATION_CONN};
use crate::config::Config;
use crate::effect::{ConnId, Effect, LogLevel, OpId, Outbound};
use crate::ids::ResourceId;
use crate::input::{Input, Outcome};
use crate::protocol::codec::{self, Incoming, Method};
use crate::record::SessionRecord;
use crate::rng::Rng;
use crate::session::{Phase, Session};
use crate::time::{MonoTime, Now, WallTime};




/// How a session went during one input (Sessions page, "Sleep and wake"):
/// what the step rules of `invariants.rs` check the rule "None goes while a
/// client watches it or while it has work in hand" against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Went {
    /// Put to sleep after idle: its agents went, its state stayed.
    Slept,
    /// Evicted by the residency limit: its agents and its state went.
    Evicted,
}

/// A disposed session whose tombstone the store holds, and what the
/// passes over the backends' transcripts said about it since it was made
/// (Sessions page, disposal; issue 19). A pass asked before the tombstone
/// cannot speak for it: it may predate the backend's delete, or have run
/// while the session was live (sim seed 11188: an echo pass from before the
/// dispose and a one-shot pass after it spent a tombstone echo still had a
/// copy for, and the next restart listed the disposed session again).
#[derive(Debug, Clone)]
pub(crate) struct Tombstone {
    /// The tombstone as stored (`deleted`), naming the session's chats.
    pub record: SessionRecord,
    /// Passes asked at or before this op do not count.
    pub since: OpId,
    /// Sources whose latest counting pass found nothing the tombstone hides.
    pub clean: BTreeSet<String>,
}

impl Tombstone {
    /// A tombstone counting passes asked after op `since` (`OpId(0)`: every
    /// pass of this process, for one read at start).
    pub(crate) fn after(record: SessionRecord, since: OpId) -> Tombstone {
        Tombstone { record, since, clean: BTreeSet::new() }
    }
}

/// The tombstones by URI, and by the conversations their chats name: a
/// pass over a backend's transcripts asks, per row, whether a tombstone
/// hides it, and a merge in slices asks the tombstones as they are at that
/// row, not as they were when the pass arrived (issue 21). Changed only
/// through `insert` and `remove`, which keep the two in step.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tombstones {
    by_uri: BTreeMap<Uri, Tombstone>,
    /// Provider, then conversation id, to the tombstones naming it.
    by_conversation: BTreeMap<String, BTreeMap<String, BTreeSet<Uri>>>,
}

impl Tombstones {
    /// Adds the tombstone of `uri`, replacing one there was.
    pub(crate) fn insert(&mut self, uri: Uri, tombstone: Tombstone) {
        self.remove(&uri);
        for c in &tombstone.record.chats {
            self.by_conversation.entry(tombstone.record.provider.to_string()).or_default().entry(c.conversation_id.to_string()).or_default().insert(uri.clone());
        }
        self.by_uri.insert(uri, tombstone);
    }

    /// Takes the tombstone of `uri` out.
    pub(crate) fn remove(&mut self, uri: &Uri) -> Option<Tombstone> {
        let tombstone = self.by_uri.remove(uri)?;
        if let Some(conversations) = self.by_conversation.get_mut(tombstone.record.provider.as_str()) {
            for c in &tombstone.record.chats {
                if let Some(uris) = conversations.get_mut(&*c.conversation_id) {
                    uris.remove(uri);
                    if uris.is_empty() {
                        conversations.remove(&*c.conversation_id);
                    }
                }
            }
            if conversations.is_empty() {
                self.by_conversation.remove(tombstone.record.provider.as_str());
            }
        }
        Some(tombstone)
    }

    /// Whether there is none.
    pub(crate) fn is_empty(&self) -> bool {
        self.by_uri.is_empty()
    }

    /// Whether `uri` has a tombstone.
    pub(crate) fn contains_key(&self, uri: &Uri) -> bool {
        self.by_uri.contains_key(uri)
    }

    /// Every tombstone, in URI order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&Uri, &Tombstone)> + '_ {
        self.by_uri.iter()
    }

    /// Every tombstone's `since` and `clean`, in URI order, `clean` to
    /// change (the record, which the index follows, stays as it is).
    pub(crate) fn passes_mut(&mut self) -> impl Iterator<Item = (&Uri, OpId, &mut BTreeSet<String>)> + '_ {
        self.by_uri.iter_mut().map(|(u, t)| (u, t.since, &mut t.clean))
    }

    /// The tombstone of `provider`'s conversation `id` (the last in URI
    /// order if several name it).
    pub(crate) fn hiding(&self, provider: &str, id: &str) -> Option<&Uri> {
        self.by_conversation.get(provider)?.get(id)?.iter().next_back()
    }

    /// Whether the index by conversation names exactly what the tombstones'
    /// chats do (for `invariants::inv_tombstone_index_consistent`).
    pub(crate) fn check(&self) -> Result<(), String> {
        let mut want: BTreeMap<String, BTreeMap<String, BTreeSet<Uri>>> = BTreeMap::new();
        for (uri, t) in &self.by_uri {
            for c in &t.record.chats {
                want.entry(t.record.provider.to_string()).or_default().entry(c.conversation_id.to_string()).or_default().insert(uri.clone());
            }
        }
        if want != self.by_conversation {
            return Err(format!("indexed {:?}, the tombstones name {want:?}", self.by_conversation));
        }
        Ok(())
    }
}

/// The whole host. See the crate docs for the contract.
///
/// Split the way quinn-proto splits an endpoint from its connections: the
/// session table here, and in [`Shared`] what one session's rules may use
/// while they run (the time, the settings, the connections and fan-out,
/// the op table and the effects queue, the catalogue). A session's own
/// rules (`impl Session`, taking `&mut Shared`) so cannot reach another
/// session; what does (residency, trees shared between sessions, the count
/// of active sessions) is the host's.
#[derive(Debug, Clone)]
pub struct Host {
    /// What every session's rules share.
    pub(crate) shared: Shared,
    pub(crate) sessions: crate::session::table::SessionTable,
    /// The sessions whose protocol state is held (`resident` is `Some`),
    /// kept with `sessions` by [`Host::add_session`], [`Host::drop_session`]
    /// and the residency code. Only these can be live, run a turn, fall
    /// asleep or be evicted, so the per-input work (idle sleeps, the
    /// residency limit, the next deadline) walks them and not the whole
    /// catalogue (issue 4: a 100k-row catalogue must not tax every input).
    pub(crate) held: BTreeSet<Uri>,
    /// Disposed sessions whose tombstone the store holds, by URI: what a
    /// pass over their backend's transcripts must not list again, across
    /// restarts (see [`crate::record::SessionRecord::deleted`]).
    pub(crate) tombstones: Tombstones,
    /// Connections refused at `Connected` (over `Limits::connections_max`),
    /// until their `Disconnected`: their frames are answered with the
    /// refusal and otherwise ignored.
    pub(crate) refused: BTreeSet<ConnId>,
    /// When the residency limit was last swept (once a minute).
    pub(crate) last_sweep: MonoTime,
    /// Passes over the backends' transcripts: in flight, and being merged
    /// a slice an input (`host/discovery.rs`).
    pub(crate) discovery: discovery::Discovery,
    /// Workspace awareness (issue 10).
    pub(crate) awareness: awareness::Awareness,
    /// The window's own trees, by handle (`host/detached.rs`).
    pub(crate) detached: crate::detached::Registry,
    /// The sessions put to sleep or evicted by the current input, in
    /// order (emptied as each input starts): for the step rules.
    pub(crate) went: Vec<(Uri, Went)>,
    /// A graceful stop in progress (`host/agents.rs`).
    pub(crate) drain: Option<agents::Drain>,
    /// The host tools' state: the wake index and the child sessions'
    /// links waiting to be looked at (`host/tools.rs`, `host/children.rs`).
    pub(crate) tools: tools::ToolState,
    /// The automations, their schedule index and their runs in flight
    /// (`host/automations.rs`).
    pub(crate) automations: automations::Automations,
    /// A session's files over the wire: the resource watches and the
    /// requests waiting on the filesystem (`crate::files`, issue 48).
    pub(crate) files: crate::files::Files,
}

/// A read-only view of the host for checkers, the simulator and debugging.
#[derive(Debug, Clone, Copy)]
pub struct HostView<'a> {
    /// The settings.
    pub config: &'a Config,
    /// The time of the last input.
    pub now: Now,
    /// The last `serverSeq` stamped.
    pub server_seq: u64,
    /// The root channel's state.
    pub root: &'a RootState,
    /// Every known session, by URI.
    pub sessions: &'a crate::session::table::SessionTable,
    /// The sessions whose state the host says it holds (must equal those
    /// with `resident` set; checked by the invariants).
    pub held: &'a BTreeSet<Uri>,
    /// Every connection, by id.
    pub conns: &'a BTreeMap<ConnId, Conn>,
    /// Chat URI to session URI.
    pub chats: &'a crate::shared::ChatIndex,
    /// The catalogue's order.
    pub catalogue: &'a crate::catalogue::Index,
    /// Counters.
    pub stats: &'a Stats,
    /// The host itself, for what is derived on demand.
    host: &'a Host,
    /// The sessions the last input put to sleep or evicted, in order.
    pub went: &'a [(Uri, Went)],
    /// A session's files over the wire: the resource watches and the
    /// requests waiting on the filesystem (issue 48).
    pub files: &'a crate::files::Files,
}

impl HostView<'_> {
    /// Whether a handshake's bearer token signs a connection in: on a host
    /// with a users directory, the host's own token or one of a user or a
    /// plugin; on a single-user host every token (the handshake's token is
    /// not checked there). The shell answers a refused one on the HTTP
    /// upgrade with 401 (issue 25); the connection's own check stays the
    /// core's (`Input::Authenticate`).
    pub fn bearer_accepted(&self, token: &str) -> bool {
        let Some(users) = self.config.users.as_ref() else { return true };
        self.config.host_token_sha256.as_deref().is_some_and(|h| crate::grants::is_host_token(token, h))
            || users.authenticate(token).is_some()
            || users.authenticate_plugin(token).is_some()
    }

    /// Whether a graceful stop was asked (no new turn starts then).
    pub fn stopping(&self) -> bool {
        self.host.stopping()
    }

    /// Whether a pass over a backend's transcripts is being merged (its
    /// slices may list sessions again, asleep, in any input).
    pub fn merging_scan(&self) -> bool {
        self.host.discovery.merging()
    }

    /// The tombstones' index by conversation checked against the
    /// tombstones (`invariants::inv_tombstone_index_consistent`).
    pub fn check_tombstones(&self) -> Result<(), String> {
        self.host.tombstones.check()
    }

    /// The replay buffer checked against the host's `serverSeq` and the
    /// configured length (`invariants::inv_replay_buffer_window`).
    pub fn check_replay(&self) -> Result<(), String> {
        self.host.shared.replay.check(crate::replay::Window::of(self.config), self.server_seq)
    }

    /// The window's own trees (detached worktrees), each still held by its
    /// handle: trees this host made, so trusted when their repository is.
    pub fn window_trees(&self) -> impl Iterator<Item = &crate::git::WorktreeRecord> + '_ {
        self.host.detached.iter().map(|(_, d)| &d.tree)
    }

    /// What `ahpd/listPeers` would answer for session `uri` now (its peer
    /// records, warnings one by one, last events; docs/AWARENESS.md), or
    /// `None` for an unknown session. `_meta` shows these only in short.
    pub fn peers_answer(&self, uri: &str) -> Option<serde_json::Value> {
        let uri: Uri = uri.to_owned();
        self.host.sessions.contains_key(&uri).then(|| awareness::answer(&self.host.awareness, &self.host.sessions, &self.host.shared.config, &uri))
    }

    /// When the host next wants a tick ([`Host::next_deadline`]), derived
    /// when asked: most checkers never read it.
    pub fn next_deadline(&self) -> Option<MonoTime> {
        self.host.next_deadline()
    }

    /// What a `listSessions` with no limit, cursor or filter would answer
    /// now, from the same code the request runs (`catalogue::list`): the
    /// sim compares every root subscriber's rows, as its notifications
    /// left them, with it (issue 19: "every client hears every change").
    pub fn fresh_listing(&self) -> Result<crate::catalogue::Listing, ahp_types::messages::JsonRpcError> {
        let params = ahp_types::commands::ListSessionsParams { channel: ahp_types::ROOT_RESOURCE_URI.to_owned(), meta: None, limit: None, cursor: None };
        crate::catalogue::list(self.catalogue, self.sessions, &params, self.config, None, &self.host.shared.external_filter())
    }
}

impl Host {
    /// Builds the host from its settings, a seed for its one random stream,
    /// and the records the store holds (the restart path is this same
    /// constructor: there is no second recovery path).
    ///
    /// Records that fail validation (a URI that is not a valid session URI,
    /// a duplicate) are skipped and logged on the first `handle`; nothing is
    /// deleted. Restored sessions are asleep and not resident: their state
    /// comes back from the backend when something needs them.
    pub fn new(config: Config, seed: u64, restored: Vec<SessionRecord>, now: Now) -> Host {
        let mut host = Host::restoring(config, seed, now);
        host.expect_records(restored.len());
        host.restore_records(restored);
        host.finish_restoring();
        host
    }

    /// [`Host::new`] in steps, for a shell that builds the host while the
    /// store is still being read (issue 21: a 100k-record start answers
    /// its first listing within 1.5× a plain read of the files): a host
    /// with no sessions yet ([`Host::expect_records`] sizes its table). Feed
    /// it every record with [`Host::restore_records`] (in the store's
    /// order: the same records in the same order make the same host as
    /// `new`), then call [`Host::finish_restoring`] once, before its first
    /// [`Host::handle`].
    pub fn restoring(config: Config, seed: u64, now: Now) -> Host {
        let root = RootState {
            agents: config
                .agents
                .iter()
                .map(|a| AgentInfo {
                    provider: a.provider.clone(),
                    display_name: a.display_name.clone(),
                    description: a.description.clone(),
                    models: Vec::new(),
                    protected_resources: None,
                    customizations: None,
                    capabilities: (a.multiple_chats || a.peer_directories).then(|| ahp_types::state::AgentCapabilities {
                        multiple_chats: a.multiple_chats.then_some(ahp_types::state::MultipleChatsCapability {
                            fork: a.forks.then_some(true),
                            side_chat: a.forks.then_some(true),
                        }),
                        multiple_working_directories: a.peer_directories.then_some(ahp_types::state::MultipleWorkingDirectoriesCapability {
                            immutable_primary: Some(true),
                            primary_replacement: Some(true),
                        }),
                    }),
                })
                .collect(),
            active_sessions: Some(0),
            terminals: None,
            config: Some(crate::host::discovery::root_config(config.show_external_sessions)),
            meta: None,
        };
        Host {
            shared: Shared {
                config,
                rng: Rng::new(seed),
                now,
                server_seq: server_seq_origin(now.wall),
                next_op: 0,
                lru_clock: 0,
                root,
                conns: BTreeMap::new(),
                chats: crate::shared::ChatIndex::new(),
                catalogue: crate::catalogue::Index::default(),
                retired: BTreeSet::new(),
                ops: BTreeMap::new(),
                replay: crate::replay::ReplayBuffer::default(),
                stats: Stats::default(),
                recent_cutoff: None,
                effects: Vec::new(),
            },
            sessions: crate::session::table::SessionTable::new(),
            held: BTreeSet::new(),
            tombstones: Tombstones::default(),
            refused: BTreeSet::new(),
            last_sweep: now.mono,
            discovery: discovery::Discovery::default(),
            awareness: awareness::Awareness::default(),
            detached: crate::detached::Registry::default(),
            went: Vec::new(),
            drain: None,
            tools: tools::ToolState::default(),
            automations: automations::Automations::default(),
            files: crate::files::Files::default(),
        }
    }

    /// Makes room for `n` more sessions, so a restore of that many does not
    /// grow the session table step by step (each step a copy of it).
    pub fn expect_records(&mut self, n: usize) {
        self.sessions.reserve(n);
    }

    /// Restores `records`, the next of the store's records, on a host made
    /// by [`Host::restoring`] (see [`Host::new`] for what is skipped).
    pub fn restore_records(&mut self, records: impl IntoIterator<Item = SessionRecord>) {
        for record in records {
            self.restore(record);
        }
    }

    /// Ends the restore [`Host::restoring`] began: the indexes built per
    /// record are brought up to date.
    pub fn finish_restoring(&mut self) {
        self.sessions.sync_conversations();
        // Built one row at a time, the ordered indexes' nodes are left ~60%
        // full; rebuilt once from their sorted entries they are full
        // (issue 21: ~60 bytes of a catalogue row). Later inserts split
        // them as usual.
        self.sessions.repack();
        self.shared.catalogue.repack();
        self.shared.chats.repack();
    }

    fn restore(&mut self, record: SessionRecord) {
        let id = match ResourceId::parse(&record.resource) {
            Ok(id) if id.store_key() == record.key() => id,
            Ok(_) | Err(_) => {
                crate::mark!("restore_record_skipped");
                self.shared.log(LogLevel::Warn, "store.record_skipped", None, format!(
                    "stored record {} does not name a valid session; left on disk, not listed",
                    crate::ids::printable(&record.key())
                ));
                return;
            }
        };
        let uri = id.uri();
        if record.deleted {
            self.tombstones.insert(uri, Tombstone::after(record, OpId(0)));
            return;
        }
        let mut record = record;
        // A chat in two records: a crash between a move's two writes
        // (docs/DECISIONS.md, 17). The record with the higher generation
        // keeps it; the other drops it and is written again.
        let rewrite = !self.sessions.contains_key(&uri) && self.settle_moved_chats(&uri, &mut record);
        let chat_clash = record.chats.iter().any(|c| self.shared.chats.contains_key(&c.resource));
        if self.sessions.contains_key(&uri) || chat_clash || record.chats.is_empty() {
            self.shared.log(LogLevel::Warn, "store.record_skipped", Some(uri), "duplicate or chat-less record skipped".to_owned());
            return;
        }
        let (values, dropped) =
            crate::session_config::restore_values(&record.config);
        if !dropped.is_empty() {
            self.shared.log(LogLevel::Info, "config.value_dropped", Some(uri.clone()), format!(
                "stored values its backend no longer offers were left out so the defaults apply: {}",
                dropped.iter().map(|k| crate::ids::printable(k)).collect::<Vec<_>>().join(", ")
            ));
        }
        record.config = values.into();
        // A record stored before the offer was kept reads one from its git
        // record, once, here: a session's reported config changes only when
        // the host says so, never because a later send wrote git facts.
        if record.offer.is_none() && !record.external {
            record.offer = crate::session::state::offer_from_git(&record).map(Box::new);
        }
        // A turn this record shows running ran in a process that stopped
        // mid-turn: it ended in an error (`crate::kept_turns`).
        for chat in &mut record.chats {
            if crate::kept_turns::interrupt(chat) {
                crate::mark!("turn_interrupted_by_stop");
                self.shared.log(LogLevel::Info, "turn.interrupted", Some(uri.clone()), format!("{}: {}", chat.resource, crate::kept_turns::INTERRUPTED));
            }
        }
        let can_resume = self.shared.agent_can_resume(&record.provider);
        let chats: Vec<Uri> = record.chats.iter().map(|c| c.resource.clone()).collect();
        self.tools.index_wakes(&record);
        self.tools.family.index(&record);
        let mut session = Session::new(record, Phase::Asleep, None, can_resume, self.shared.now.mono);
        // Listed from the store's rows: a client's listing holds this row,
        // so the first change after a restart is told as a change of it.
        // Settled: the row is the one the session builds, made only when
        // the session is first handed out to change (no row built per
        // record at start).
        session.mark_settled();
        let (modified_at, external) = (session.modified_at(), session.record().external);
        let slot = self.add_session(uri.clone(), session);
        for chat in chats {
            self.index_chat(chat, &uri);
        }
        if rewrite {
            self.store_put(&uri);
        }
        // The catalogue's order shares the table's one copy of the URI.
        let shared = self.sessions.shared_uri(&uri).unwrap_or_else(|| uri.as_str().into());
        self.shared.catalogue.insert(modified_at.0, shared, slot, external);
    }

    /// A record read back (session `uri`) that names a chat a session
    /// restored before it holds: a crash between a move's two writes
    /// (`moveChat`, docs/DECISIONS.md, 17) left the chat in both. The
    /// record whose copy of the chat has the higher move generation
    /// (`ChatRecord::moves`) keeps it; the other drops it and its record is
    /// written again (the one restored before now, this one by the caller
    /// when this returns true). A default chat of either is never dropped:
    /// a record whose default chat another session holds is skipped, as
    /// before. So the chat is in exactly one session, whatever order the
    /// store reads the two records in.
    fn settle_moved_chats(&mut self, uri: &Uri, record: &mut SessionRecord) -> bool {
        let mut rewrite_self = false;
        let clashes: Vec<(Uri, String)> = record
            .chats
            .iter()
            .filter(|c| !record.is_default_chat(&c.resource))
            .filter_map(|c| self.shared.chats.get(&c.resource).map(|holder| (c.resource.clone(), holder.to_string())))
            .collect();
        for (chat, holder) in clashes {
            let mine = record.chats.iter().find(|c| c.resource == chat).map_or(0, |c| c.moves());
            let Some(other) = self.sessions.get(&holder) else { continue };
            if other.record().is_default_chat(&chat) {
                continue;
            }
            let theirs = other.record().chats.iter().find(|c| c.resource == chat).map_or(0, |c| c.moves());
            crate::mark!("restore_moved_chat_settled");
            if mine > theirs {
                if let Some(other) = self.sessions.get_mut(&holder) {
                    other.drop_chat(&chat);
                }
                self.shared.chats.remove(&chat);
                self.store_put(&holder);
                self.shared.log(LogLevel::Info, "store.moved_chat_settled", Some(uri.clone()), format!("{chat} stays here (move {mine}); dropped from {holder}"));
            } else {
                record.chats.retain(|c| c.resource != chat);
                rewrite_self = true;
                self.shared.log(LogLevel::Info, "store.moved_chat_settled", Some(holder.clone()), format!("{chat} stays here (move {theirs}); dropped from {uri}"));
            }
        }
        rewrite_self
    }

    /// Indexes `chat` to the session at `session_uri` in the chat →
    /// session map, which keeps the session table's own copy of the URI
    /// (a copy of its own when the session is not in the table yet).
    pub(crate) fn index_chat(&mut self, chat: Uri, session_uri: &str) {
        let shared = self.sessions.shared_uri(session_uri).unwrap_or_else(|| session_uri.into());
        self.shared.chats.insert(chat, shared);
    }

    /// Adds a session to the host's map, noting it in `held` when its
    /// state is held.
    pub(crate) fn add_session(&mut self, uri: Uri, session: Session) -> crate::session::table::Slot {
        if session.resident().is_some() {
            self.held.insert(uri.clone());
        } else {
            self.held.remove(&uri);
        }
        self.sessions.insert(uri, session)
    }

    /// Removes a session from the host's map and from `held`.
    pub(crate) fn drop_session(&mut self, uri: &Uri) -> Option<Session> {
        self.held.remove(uri);
        self.sessions.remove(uri)
    }

    /// The held sessions, in URI order (see `held`).
    pub(crate) fn held_sessions(&self) -> impl Iterator<Item = (&Uri, &Session)> + '_ {
        self.held.iter().filter_map(|u| self.sessions.get_key_value(u))
    }

    /// Applies one input at time `now` and returns the effects to execute,
    /// in order. Then fires whatever is due at `now` (idle sleeps, the
    /// residency sweep). Never panics on any input; protocol errors are
    /// `Effect::Send` replies.
    pub fn handle(&mut self, now: Now, input: Input) -> Vec<Effect> {
        // Monotonic time never goes back; a shell that read an earlier value
        // is clamped rather than trusted.
        let mono = now.mono.max(self.shared.now.mono);
        self.shared.now = Now { mono, wall: now.wall };
        self.went.clear();
        self.sessions.clear_touched();
        // The first input: the first pass over every backend's
        // transcripts runs behind whatever it is.
        self.finder().scan_at_first_input();
        let tick = matches!(input, Input::Tick);
        if self.discovery.merging() && !tick {
            // Something else came while a pass is half merged: the rest of
            // it is judged against what this input changes.
            crate::mark!("scan_merge_interleaved");
        }
        match input {
            Input::Connected { conn } => self.on_connected(conn),
            Input::Authenticate { conn, token } => self.on_bearer(conn, &token),
            Input::Frame { conn, text } => {
                let frame = codec::decode_bounded(&text, self.shared.config.limits.frame_max_bytes);
                self.on_frame(conn, text.len(), frame)
            }
            Input::FrameDecoded { conn, bytes, frame } => {
                // Whatever bound the caller decoded with, the host's holds.
                let frame = match codec::over_limit(bytes, self.shared.config.limits.frame_max_bytes) {
                    Some(refused) => Err(refused),
                    None => frame,
                };
                self.on_frame(conn, bytes, frame)
            }
            Input::Disconnected { conn } => {
                self.refused.remove(&conn);
                self.on_disconnected(conn)
            }
            Input::Done { op, outcome } => self.on_done(op, outcome),
            Input::Backend { chat, event } => self.on_backend_event(&chat, event),
            Input::PolicyChanged(policy) => {
                self.shared.config.policy = policy;
                self.shared.log(LogLevel::Info, "policy.reloaded", None, format!("{} rules", self.shared.config.policy.rules.len()));
            }
            Input::Shutdown { grace_ms } => self.on_shutdown(grace_ms),
            Input::HostTool { call, chat, tool } => {
                let outs = self.tools().on_host_tool(call, &chat, tool);
                self.apply_tools(outs);
            }
            Input::FsChanged { watch, changes } => {
                let outs = self.files().on_changed(watch, changes);
                self.apply_files(outs);
            }
            Input::Tick => {}
        }
        timers::Timer::fire_all(self, tick);
        // The index a checker reads is the sessions' as this input left
        // them.
        self.sessions.sync_conversations();
        // Rows whose sent copy is what they build again keep none.
        self.sessions.settle_touched();
        std::mem::take(&mut self.shared.effects)
    }

    /// The monotonic time at which the host next has something to do (an
    /// idle session falls asleep, the residency sweep runs, a wake is
    /// due, ...), or `None`: the earliest deadline of the timer table
    /// (`host/timers.rs`), which `handle` fires after every input. Derived
    /// from state, never stored (docs/STYLE.md 3.3).
    pub fn next_deadline(&self) -> Option<MonoTime> {
        timers::Timer::earliest(self)
    }

    /// A read-only view for checkers.
    pub fn view(&self) -> HostView<'_> {
        HostView {
            config: &self.shared.config,
            now: self.shared.now,
            server_seq: self.shared.server_seq,
            root: &self.shared.root,
            sessions: &self.sessions,
            held: &self.held,
            conns: &self.shared.conns,
            chats: &self.shared.chats,
            catalogue: &self.shared.catalogue,
            stats: &self.shared.stats,
            host: self,
            went: &self.went,
            files: &self.files,
        }
    }

    /// One client frame, decoded (`frame`, `bytes` long): refused on a
    /// connection over `connections_max` or over its rate, held behind a
    /// handshake, or run.
    fn on_frame(&mut self, conn: ConnId, bytes: usize, frame: codec::Decoded) {
        if self.refused.contains(&conn) {
            return self.on_refused_frame(conn, &frame);
        }
        if !self.shared.conns.contains_key(&conn) {
            // A frame for a connection the host never saw connect: accept it
            // as connected (within the connection limit) rather than drop
            // the client's request.
            self.on_connected(conn);
            if self.refused.contains(&conn) {
                return self.on_refused_frame(conn, &frame);
            }
        }
        if self.shared.conns.get(&conn).is_some_and(|c| c.rate_closed) {
            // Closed for its rate: nothing more of it is served.
            return;
        }
        if !self.take_frame_credit(conn) {
            let limit = self.shared.config.limits.frames_per_second;
            crate::mark!("limit_rate_refused");
            if let Ok(Incoming::Request { id, .. }) = frame {
                self.shared.reply_error(conn, id, crate::protocol::error::error(
                    crate::protocol::error::INVALID_REQUEST,
                    format!("rate limit: more than {limit} frames per second; slow down"),
                ));
            }
            // After the reply: a connection closed for it reads why first.
            self.on_rate_refused(conn);
            return;
        }
        // A frame held behind a handshake waits decoded.
        if let Some(frame) = self.queue_behind_handshake(conn, frame, bytes) {
            self.run_frame(conn, frame);
        }
    }

    /// Routes a command's completion to the owner its op names
    /// ([`Op`]): the session, request or tree whose continuation it is.
    /// An op the host no longer knows (its owner went) is counted stale.
    fn on_done(&mut self, op: OpId, outcome: Outcome) {
        let Some(purpose) = self.shared.ops.remove(&op) else {
            self.shared.stats.stale_ops += 1;
            return;
        };
        match purpose {
            Op::Fire => {
                if let Outcome::Failed { message } = outcome {
                    self.shared.log(LogLevel::Warn, "backend.command_failed", None, message);
                }
            }
            Op::Start { session, chat } => self.on_started(&session, &chat, op, outcome),
            Op::Forget { session, chat, turn_ids } => {
                self.in_session(&session, |s, sh| s.forget_answered(sh, &chat, &turn_ids, outcome));
            }
            Op::Scan { provider } => {
                let found = self.finder().on_scanned(&provider, op, outcome);
                self.apply_found(found);
            }
            Op::Send { session } => self.on_sent(&session, op, outcome),
            Op::Delete { session } => self.on_conversation_deleted(&session, op, outcome),
            Op::StorePut { session } => self.on_record_written(&session, op, outcome),
            // A create's and a child's facts go to who asked; a window's
            // cut to the window; the rest of git's answers to the trees.
            Op::Git(GitOp::Create { conn, id, request }) => {
                let facts = git::folder_facts(&mut self.shared, outcome);
                self.create_with_facts(conn, id, *request, facts);
            }
            Op::Git(GitOp::Child { call, request }) => {
                let facts = git::folder_facts(&mut self.shared, outcome);
                self.create_child(call, *request, facts);
            }
            Op::Git(GitOp::Detached(purpose)) => self.in_window(|w| w.on_detached_done(op, purpose, outcome)),
            Op::Git(purpose) => {
                let outs = self.trees().on_git_done(op, purpose, outcome);
                self.apply_trees(outs);
            }
            Op::Registry { scan } => self.aware().on_registry_done(op, scan, outcome),
            Op::Fs => {
                let outs = self.files().on_done(op, outcome);
                self.apply_files(outs);
            }
            Op::AutomationWrite { automation } => {
                if let Outcome::Failed { message } = outcome {
                    // Carried by the automation's next write; a restart
                    // reads what the store last took.
                    self.shared.log(LogLevel::Warn, "store.write_failed", None, format!("{automation}: {message}"));
                }
            }
            Op::StoreForget { session } => {
                if let Outcome::Failed { message } = outcome {
                    // Still on disk: read back at the next start, and
                    // removed by the first pass after it.
                    self.shared.log(LogLevel::Warn, "store.write_failed", Some(session), message);
                }
            }
            Op::StoreDelete { session } => {
                let failure = match outcome {
                    Outcome::Failed { message } => Some(message),
                    _ => None,
                };
                self.dispose_stored(&session, failure);
            }
        }
    }

    /// Runs one decoded frame of `conn` (rate and handshake checks done).
    pub(crate) fn run_frame(&mut self, conn: ConnId, frame: codec::Decoded) {
        match frame {
            Ok(Incoming::Request { id, method, params }) => self.on_request(conn, id, method, params),
            Ok(Incoming::Notification { method, params }) => self.on_notification(conn, &method, params),
            Ok(Incoming::Action(params)) => self.on_action_notification(conn, *params),
            Ok(Incoming::Response) => {}
            Err(e) => self.shared.send(conn, Outbound::Error { id: e.id, error: e.error }),
        }
    }

    /// Routes request `id` of `conn` to its handler, by its decoded method
    /// (each handler parses its own params). The order of the checks: a
    /// `dispatchAction` sent as a request is refused (-32600), an unknown
    /// method is not found (-32601), `ping` and the handshake's methods
    /// are answered at once, and everything else waits for `initialize`.
    pub(crate) fn on_request(&mut self, conn: ConnId, id: u64, method: Method, params: serde_json::Value) {
        use crate::protocol::error::*;
        let initialized = self.shared.conns.get(&conn).is_some_and(|c| c.initialized);
        match method {
            Method::DispatchAction => self.shared.reply_error(conn, id, error(INVALID_REQUEST, "dispatchAction is a notification: send it without an id (its answer is the action's echo on the channel)")),
            Method::Unknown(name) => self.shared.reply_error(conn, id, error(METHOD_NOT_FOUND, format!("method not found: {}", crate::ids::printable(&name)))),
            Method::Ping => self.shared.reply(conn, id, serde_json::Value::Null),
            Method::Initialize => self.on_initialize(conn, id, params),
            Method::Reconnect => self.on_reconnect(conn, id, params),
            // Signing in may come first, so that a handshake's subscriptions
            // are checked against who the connection is (as
            // `Input::Authenticate` signs one in with its bearer token).
            Method::Authenticate => self.on_authenticate(conn, id, params),
            _ if !initialized => self.shared.reply_error(conn, id, not_initialized()),
            Method::Subscribe => self.on_subscribe(conn, id, params),
            Method::CreateSession => self.on_create_session(conn, id, params),
            Method::DisposeSession => self.on_dispose_session(conn, id, params),
            Method::ListSessions => self.on_list_sessions(conn, id, params),
            Method::FetchTurns => self.on_fetch_turns(conn, id, params),
            Method::CreateChat => self.on_create_chat(conn, id, params),
            Method::DisposeChat => self.on_dispose_chat(conn, id, params),
            Method::MoveChat => self.on_move_chat(conn, id, params),
            Method::ResolveSessionConfig => self.on_resolve_request(conn, id, params, false),
            Method::SessionConfigCompletions => self.on_resolve_request(conn, id, params, true),
            Method::ListPeers => self.aware().on_list_peers(conn, id, params),
            Method::RunAutomation => {
                let outs = self.automation().on_run(conn, id, params);
                self.apply_automation(outs);
            }
            Method::FetchAutomationRuns => self.automation().on_fetch_runs(conn, id, params),
            Method::ListAutomationTriggerDefinitions => self.automation().on_list_trigger_definitions(conn, id, params),
            Method::Detached(request) => self.in_window(|w| w.on_detached_request(conn, id, request, params)),
            Method::Files(request) => {
                let outs = self.files().on_request(conn, id, request, params);
                self.apply_files(outs);
            }
            Method::Unsubscribe => {
                self.on_unsubscribe(conn, params);
                self.shared.reply(conn, id, serde_json::Value::Null);
            }
        }
    }

    /// Whether request `id` of `conn`, which waited (for a wake or behind a
    /// parked write), runs on now: its connection is still there and, as
    /// at arrival, initialized. A connection that is not (only an id used
    /// again after its connection left can be) is answered as it would
    /// have been at arrival.
    pub(crate) fn may_resume(&mut self, conn: ConnId, id: u64) -> bool {
        match self.shared.conns.get(&conn) {
            None => false,
            Some(c) if c.initialized => true,
            Some(_) => {
                self.shared.reply_error(conn, id, not_initialized());
                false
            }
        }
    }

    /// A `dispatchAction` whose params decoded to their type
    /// ([`Incoming::Action`]): as [`Host::on_notification`] takes it.
    fn on_action_notification(&mut self, conn: ConnId, params: ahp_types::commands::DispatchActionParams) {
        if self.shared.conns.get(&conn).is_some_and(|c| c.initialized) {
            self.on_dispatch_action_params(conn, params);
        } else {
            self.shared.log(LogLevel::Warn, "protocol.notification_ignored", None, "ignored notification dispatchAction".to_owned());
        }
    }

    fn on_notification(&mut self, conn: ConnId, method: &Method, params: serde_json::Value) {
        let initialized = self.shared.conns.get(&conn).is_some_and(|c| c.initialized);
        match method {
            Method::DispatchAction if initialized => self.on_dispatch_action(conn, params),
            Method::Unsubscribe => self.on_unsubscribe(conn, params),
            _ => self.shared.log(LogLevel::Warn, "protocol.notification_ignored", None, format!(
                "ignored notification {}", crate::ids::printable(method.name())
            )),
        }
    }

    /// Writes the session's record ([`Session::store_put`]).
    pub(crate) fn store_put(&mut self, uri: &Uri) -> Option<OpId> {
        self.sessions.get_mut(uri)?.store_put(&mut self.shared)
    }

    /// Workspace awareness at work: its state with what it may reach
    /// ([`awareness::Aware`]).
    pub(crate) fn aware(&mut self) -> awareness::Aware<'_> {
        awareness::Aware { state: &mut self.awareness, sessions: &mut self.sessions, held: &self.held, shared: &mut self.shared }
    }

    /// The window's trees at work ([`detached::Window`]).
    pub(crate) fn window(&mut self) -> detached::Window<'_> {
        detached::Window { detached: &mut self.detached, sessions: &self.sessions, shared: &mut self.shared, outs: Vec::new() }
    }

    /// Runs `rule` on the window's trees, then does what it decided
    /// reaches past them ([`detached::WindowOut`]), in order.
    pub(crate) fn in_window(&mut self, rule: impl FnOnce(&mut detached::Window<'_>)) {
        let mut window = self.window();
        rule(&mut window);
        let outs = std::mem::take(&mut window.outs);
        for out in outs {
            match out {
                detached::WindowOut::KeepForUsers(tree) => self.trees().keep_for_users(&tree),
            }
        }
    }

    /// The sessions' trees and git's answers at work ([`git::Trees`]).
    pub(crate) fn trees(&mut self) -> git::Trees<'_> {
        git::Trees { sessions: &mut self.sessions, detached: &self.detached, shared: &mut self.shared }
    }

    /// Does what [`git::Trees`] decided reaches past it, in its order.
    pub(crate) fn apply_trees(&mut self, outs: Vec<git::TreesOut>) {
        use git::TreesOut;
        for out in outs {
            match out {
                TreesOut::FailTurn { session, chat, turn_id, reason } => self.fail_turn(&session, &chat, &turn_id, &reason),
                TreesOut::FailWaiters { session, waiters, reason } => self.fail_waiters(&session, waiters, &reason),
                TreesOut::Wake(session) => self.wake(&session),
                TreesOut::RestartAgents(session) => self.restart_agents(&session),
                TreesOut::FinishDispose(session) => self.dispose_finish(&session, None),
                TreesOut::WindowCutFailed { op, purpose, outcome } => self.in_window(|w| w.on_detached_done(op, *purpose, *outcome)),
            }
        }
    }

    /// The automations at work: their state with what they read of the
    /// host ([`automations::Auto`]); what they ask of the host comes back
    /// as outs for [`Host::apply_automation`].
    pub(crate) fn automation(&mut self) -> automations::Auto<'_> {
        let stopping = self.stopping();
        automations::Auto {
            state: &mut self.automations,
            sessions: &self.sessions,
            tombstones: &self.tombstones,
            detached: &self.detached,
            shared: &mut self.shared,
            stopping,
            outs: Vec::new(),
        }
    }

    /// Does what the automations asked ([`automations::AutomationOut`]),
    /// in order; a step of theirs that follows a host action is handed
    /// back to them here, after it.
    pub(crate) fn apply_automation(&mut self, outs: Vec<automations::AutomationOut>) {
        use automations::AutomationOut as Out;
        for out in outs {
            match out {
                Out::Reject { conn, channel, action, origin, reason } => self.reject(conn, &channel, *action, origin, reason),
                Out::AddSession { uri, session, chat, run } => {
                    self.tombstones.remove(&uri);
                    self.add_session(uri.clone(), *session);
                    self.index_chat(chat, &uri);
                    self.in_session(&uri, |s, sh| s.start_default_agent(sh));
                    self.automation().session_added(&run, &uri);
                }
                Out::Wake { session } => self.wake(&session),
                Out::Deliver { session, chat, turn_id, message, sender } => self.deliver(&session, &chat, turn_id, *message, sender),
                Out::Queue { run, session } => {
                    let outs = self.automation().queue_run(&run, &session);
                    self.apply_automation(outs);
                }
                Out::Started { automation, run, answer } => self.automation().run_started(&automation, &run, answer),
            }
        }
    }

    /// A session's files at work: their state with what they read of the
    /// host ([`crate::files::FileWork`]); what they ask of the host comes
    /// back as outs for [`Host::apply_files`].
    pub(crate) fn files(&mut self) -> crate::files::FileWork<'_> {
        crate::files::FileWork { state: &mut self.files, sessions: &self.sessions, shared: &mut self.shared, outs: Vec::new() }
    }

    /// Does what the files owner asked ([`crate::files::FilesOut`]), in
    /// order.
    pub(crate) fn apply_files(&mut self, outs: Vec<crate::files::FilesOut>) {
        use crate::files::FilesOut;
        for out in outs {
            match out {
                FilesOut::Touch(session) => self.touch(&session),
            }
        }
    }

    /// Discovery at work: its state with what it may reach
    /// ([`discovery::Finder`]).
    pub(crate) fn finder(&mut self) -> discovery::Finder<'_> {
        discovery::Finder { state: &mut self.discovery, sessions: &mut self.sessions, tombstones: &mut self.tombstones, shared: &mut self.shared }
    }

    /// Merges the next slice of the passes waiting, when one is due
    /// ([`discovery::Finder::begin_slice`]), a step at a time: what each
    /// step found is applied before the next row is judged.
    pub(crate) fn merge_if_due(&mut self, tick: bool) {
        let Some(mut slice) = self.finder().begin_slice(tick) else { return };
        while let Some(found) = self.finder().merge_on(&mut slice) {
            self.apply_found(found);
        }
    }

    /// Applies what discovery found ([`discovery::Found`]), in order.
    pub(crate) fn apply_found(&mut self, found: Vec<discovery::Found>) {
        use discovery::Found;
        for out in found {
            match out {
                Found::Listed { uri, session } => {
                    let chats: Vec<Uri> = session.record().chats.iter().map(|c| c.resource.clone()).collect();
                    self.add_session(uri.clone(), *session);
                    for chat in chats {
                        self.index_chat(chat, &uri);
                    }
                    self.announce(&uri);
                }
                Found::Store(uri) => {
                    self.store_put(&uri);
                }
                Found::Refreshed { uri, title, modified_at } => {
                    let Some(session) = self.sessions.get_mut(&uri) else { continue };
                    if let Some(title) = title {
                        session.set_title(title);
                    }
                    self.advance_modified_at(&uri, modified_at);
                    self.summary_changed(&uri);
                }
                Found::ChatJoined { uri, chat, modified_at } => {
                    let Some(session) = self.sessions.get_mut(&uri) else { continue };
                    let resource = chat.resource.clone();
                    session.join_chat(*chat);
                    self.index_chat(resource, &uri);
                    self.advance_modified_at(&uri, modified_at);
                    self.store_put(&uri);
                    self.summary_changed(&uri);
                }
                Found::Gone(uri) => {
                    let shown = self.shown_to_clients(&uri);
                    let Some(session) = self.drop_session(&uri) else { continue };
                    if session.is_announced() {
                        self.shared.catalogue.remove(session.modified_at().0, &uri);
                    }
                    for chat in &session.record().chats {
                        self.shared.chats.remove(&chat.resource);
                    }
                    if shown {
                        let params = ahp_types::notifications::SessionRemovedParams { channel: ROOT_RESOURCE_URI.to_owned(), session: uri };
                        self.shared.notify_root("root/sessionRemoved", serde_json::to_value(params).unwrap_or_default());
                    }
                }
                Found::Damaged { uri, chat, provider } => {
                    if self.in_session(&uri, |s, sh| s.mark_transcript_damaged(sh, &chat)) == Some(true) {
                        self.shared.log(LogLevel::Warn, "backend.transcript_damaged", Some(uri.clone()), format!("{chat}: a pass over {provider}'s transcripts could not read it"));
                        self.summary_changed(&uri);
                    }
                }
                Found::Shown(uri) => {
                    let Some(session) = self.sessions.get_mut(&uri) else { continue };
                    let summary = session.summary();
                    session.replace_sent_row(summary.clone());
                    let params = ahp_types::notifications::SessionAddedParams { channel: ROOT_RESOURCE_URI.to_owned(), summary };
                    self.shared.notify_root("root/sessionAdded", serde_json::to_value(params).unwrap_or_default());
                }
                Found::Hidden(uri) => {
                    let params = ahp_types::notifications::SessionRemovedParams { channel: ROOT_RESOURCE_URI.to_owned(), session: uri };
                    self.shared.notify_root("root/sessionRemoved", serde_json::to_value(params).unwrap_or_default());
                }
                Found::Log(event) => self.shared.effects.push(Effect::Log(event)),
            }
        }
    }

    /// The host tools at work, child sessions with them ([`tools::Tools`]).
    pub(crate) fn tools(&mut self) -> tools::Tools<'_> {
        let stopping = self.stopping();
        tools::Tools {
            state: &mut self.tools,
            sessions: &mut self.sessions,
            shared: &mut self.shared,
            awareness: &self.awareness,
            detached: &self.detached,
            tombstones: &self.tombstones,
            stopping,
        }
    }

    /// Applies what the host tools decided ([`tools::ToolOut`]), in order.
    pub(crate) fn apply_tools(&mut self, outs: Vec<tools::ToolOut>) {
        use tools::ToolOut;
        for out in outs {
            match out {
                ToolOut::Deliver { session, chat, id, message, sender } => self.deliver(&session, &chat, id, *message, sender),
                ToolOut::ExposeMeta(uri) => self.tools().expose_tool_meta(&uri),
                ToolOut::Answer { call, result } => self.shared.effects.push(Effect::HostToolAnswer { call, result }),
                ToolOut::AddChild { parent, uri, chat, session } => {
                    self.add_session(uri.clone(), *session);
                    self.index_chat(chat, &uri);
                    self.tools().child_added(&parent, &uri);
                }
                ToolOut::StartQueued(uri) => self.start_queued_if_due(&uri, false),
                ToolOut::LetAgentsGo(uri) => self.let_agents_go(&uri),
                ToolOut::ForgetUnborn(uri) => self.forget_unborn(&uri),
                ToolOut::ChildGone { parent, child, call, message } => self.tools().child_gone(parent.as_ref(), &child, call, message),
                ToolOut::Wake(uri) => self.wake(&uri),
                ToolOut::OwedLink(uri) => {
                    let outs = self.tools().owed_link(&uri);
                    self.apply_tools(outs);
                }
            }
        }
    }

    /// Restores the automations the store holds (after [`Host::new`] or
    /// [`Host::restoring`], before the first `handle`): see
    /// [`automations::Auto::restore`].
    pub fn restore_automations(&mut self, records: impl IntoIterator<Item = crate::automation::AutomationRecord>) {
        self.automation().restore(records);
    }

    /// Fires every wake due at the current wall time, each applied before
    /// the next is looked at ([`tools::Tools::fire_next_wake`]; the timer
    /// table, after every input).
    pub(crate) fn fire_wakes(&mut self) {
        while let Some(outs) = self.tools().fire_next_wake() {
            self.apply_tools(outs);
        }
    }

    /// Settles the family links read back at start or owed while the host
    /// stopped, one session at a time ([`tools::Tools::settle_owed`]; the
    /// timer table, after every input).
    pub(crate) fn deliver_owed_children(&mut self) {
        for uri in self.tools().take_owed() {
            let outs = self.tools().settle_owed(&uri);
            self.apply_tools(outs);
        }
    }

    /// A child's folder's facts are known: the child is made
    /// ([`tools::Tools::create_child`]).
    pub(crate) fn create_child(&mut self, call: crate::tools::HostCallId, request: crate::tools::ChildStart, facts: Result<crate::git::RepoFacts, String>) {
        let outs = self.tools().create_child(call, request, facts);
        self.apply_tools(outs);
    }

    /// Hands a fact of a session's life to every part that takes it, in
    /// this one order (`crate::facts`): the lifecycle says each fact
    /// once, here is who hears it.
    /// Returns what the parts that heard it say back to the lifecycle
    /// ([`crate::facts::Heard`]).
    pub(crate) fn tell(&mut self, fact: crate::facts::Fact<'_>) -> crate::facts::Heard {
        use crate::facts::Fact;
        let mut heard = crate::facts::Heard::default();
        match fact {
            Fact::StartAnswered { session, refused } => {
                // A run's session: its message queued, or the run failed.
                let outs = self.automation().run_session_answered(session, refused);
                self.apply_automation(outs);
            }
            Fact::WakeEnded { session, failed } => {
                if failed.is_none() {
                    // A queue that waited in the record (a restart, an agent
                    // that exited) goes on now that the session is live.
                    self.start_queued_if_due(session, false);
                }
                // Pinned automation runs that woke it queue their message
                // (or fail with the backend's error).
                let outs = self.automation().runs_after_wake(session, failed);
                self.apply_automation(outs);
            }
            Fact::TurnEnded { session, chat } => {
                // An automation run waiting for this turn ends as it did.
                let outs = self.automation().runs_follow_turn(session, chat);
                self.apply_automation(outs);
                // A child's turn end is numbered in the record it is
                // written with (`host/children.rs`).
                heard.child_finished = self.tools().note_child_finish(session, chat);
            }
            Fact::TurnCut { session, chat } => {
                // Numbered as any turn end; owed to the parent while the
                // host stops, delivered after the restart.
                if self.tools().note_child_finish(session, chat) {
                    heard.child_finished = true;
                    let outs = self.tools().deliver_child_finish(session);
                    self.apply_tools(outs);
                }
            }
            Fact::TurnWritten { session, checkpoint, child_finished } => {
                if child_finished {
                    let outs = self.tools().deliver_child_finish(session);
                    self.apply_tools(outs);
                }
                if checkpoint {
                    // A turn that completed or failed for good gets its
                    // checkpoint.
                    self.in_session(session, |s, sh| s.checkpoint_turn(sh));
                }
                // The chat's next queued message, if one is due.
                self.start_queued_if_due(session, false);
            }
            Fact::Disposed { session, record } => {
                self.tools.forget_wakes(record);
                self.tools().forget_family(record);
                let outs = self.automation().follow_dispose(session);
                self.apply_automation(outs);
                let outs = self.files().follow_dispose(session);
                self.apply_files(outs);
            }
            Fact::DisposeRefused { session } => {
                // The family's deliveries the dispose held back are settled
                // at the end of this input (the timer table).
                self.tools().owe_family(session);
            }
        }
        heard
    }

    /// Runs `rule` on session `uri` with what it shares with the host; `None`
    /// when no such session is known. How the host hands an input or a
    /// completion to the session it is for.
    pub(crate) fn in_session<R>(&mut self, uri: &Uri, rule: impl FnOnce(&mut Session, &mut Shared) -> R) -> Option<R> {
        let session = self.sessions.get_mut(uri)?;
        Some(rule(session, &mut self.shared))
    }

    /// Moves the session's `modifiedAt` forward to `to` and its catalogue
    /// row with it ([`Session::advance_modified`]). Every site that moves a
    /// session's `modifiedAt` calls this or that.
    pub(crate) fn advance_modified_at(&mut self, uri: &Uri, to: WallTime) {
        if let Some(s) = self.sessions.get_mut(uri) {
            s.advance_modified(&mut self.shared, to);
        }
    }

    /// Marks the session used now ([`Session::touch`]).
    pub(crate) fn touch(&mut self, uri: &Uri) {
        match self.sessions.get_mut(uri) {
            Some(s) => s.touch(&mut self.shared),
            None => self.shared.lru_clock += 1,
        }
    }

    /// Whether agents may run in every one of `folders` (Sessions page: "A
    /// worktree the host made is trusted when the repository it came from
    /// is"). `Err` is the reason a client reads. Free when no list of
    /// trusted folders is kept. With a list, a session with no folder is
    /// refused: its agent would start wherever the host runs it, which no
    /// entry of the list names.
    pub(crate) fn trusted(&self, folders: &[Uri]) -> Result<(), String> {
        trusted_folders(&self.shared.config, &self.sessions, &self.detached, folders)
    }

    /// The session URI a session or chat channel belongs to.
    pub(crate) fn session_of(&self, channel: &str) -> Option<Uri> {
        session_of(&self.sessions, &self.shared.chats, channel)
    }

}

/// Fan-out and the catalogue: a channel's actions reach its subscribers,
/// a session's row reaches the catalogue and root (docs/REFERENCE-NOTES.md,
/// AHP 12: the host alone produces the cross-channel mirrors).
impl Host {
    /// After a chat changed ([`Session::after_chat_change`](crate::session::Session::after_chat_change)).
    pub(crate) fn after_chat_change(&mut self, session_uri: &Uri, chat_uri: &Uri) {
        if let Some(s) = self.sessions.get_mut(session_uri) {
            s.after_chat_change(&mut self.shared, chat_uri);
        }
    }

    /// Tells root subscribers what moved in an announced session's row
    /// ([`Session::summary_changed`](crate::session::Session::summary_changed)).
    pub(crate) fn summary_changed(&mut self, session_uri: &Uri) {
        if let Some(s) = self.sessions.get_mut(session_uri) {
            s.summary_changed(&mut self.shared);
        }
    }

    /// Applies an accepted action to the authoritative state of `channel`
    /// with the protocol's own reducer, stamps the next `serverSeq`, keeps it
    /// for replay and sends it to every subscriber of the channel. Returns
    /// false (and sends nothing) when the reducer finds the action invalid.
    /// A session's channels go through the session ([`Session::emit`](crate::session::Session::emit)).
    pub(crate) fn emit(&mut self, channel: &Uri, action: StateAction, origin: Option<ActionOrigin>) -> bool {
        if channel == ROOT_RESOURCE_URI {
            match apply_action_to_root(&mut self.shared.root, &action) {
                ReduceOutcome::Invalid(e) => {
                    self.shared.log(LogLevel::Warn, "action.invalid", None, format!("not applied: {e}"));
                    return false;
                }
                ReduceOutcome::OutOfScope => {
                    self.shared.log(LogLevel::Warn, "action.out_of_scope", None, "action does not belong to its channel".to_owned());
                    return false;
                }
                _ => {}
            }
        } else if let Some(session) = self.session_of(channel).and_then(|uri| self.sessions.get_mut(&uri)) {
            return session.emit(&mut self.shared, channel, action, origin);
        }
        self.shared.fan_out(channel, action, origin);
        true
    }

    /// Whether root subscribers are told about this session: every session
    /// of this host's own, and the external ones the mode shows.
    pub(crate) fn shown_to_clients(&self, uri: &Uri) -> bool {
        self.sessions.get(uri).is_some_and(|s| self.shared.shows(s.record(), s.modified_at()))
    }

    /// Announces a session ([`Session::announce`]).
    pub(crate) fn announce(&mut self, session_uri: &Uri) {
        if let Some((s, place)) = self.sessions.get_mut_placed(session_uri) {
            s.announce(&mut self.shared, &place);
        }
    }

    /// Recounts the sessions running a turn and says so on root when the
    /// number moved (Sessions page: "that number counts the sessions
    /// running a turn").
    pub(crate) fn recount_active(&mut self) {
        let count = self.held_sessions().filter(|(_, s)| s.has_active_turn()).count() as i64;
        if self.shared.root.active_sessions != Some(count) {
            let action = StateAction::RootActiveSessionsChanged(RootActiveSessionsChangedAction { active_sessions: count });
            self.emit(&ROOT_RESOURCE_URI.to_owned(), action, None);
        }
    }
}

/// [`Host::trusted`] from what it reads: `config`'s list of trusted
/// folders, and the trees the host made (the sessions' and the window's,
/// trusted when the repository they came from is). `Err` is the reason a
/// client reads.
pub(crate) fn trusted_folders(config: &Config, sessions: &crate::session::table::SessionTable, detached: &crate::detached::Registry, folders: &[Uri]) -> Result<(), String> {
    if !config.trust.gated() {
        return Ok(());
    }
    if folders.is_empty() {
        return Err("this host runs agents only in trusted folders: name a working directory in one of them".to_owned());
    }
    let trees = crate::trust::made_trees(sessions.values().map(|s| s.record()), detached.iter().map(|(_, d)| &d.tree));
    for folder in folders {
        config.trust.check(folder, &trees)?;
    }
    Ok(())
}

/// The session URI a session or chat channel belongs to
/// ([`Host::session_of`], for the parts that hold the session table and
/// the chat index without the host).
pub(crate) fn session_of(sessions: &crate::session::table::SessionTable, chats: &crate::shared::ChatIndex, channel: &str) -> Option<Uri> {
    if sessions.contains_key(channel) {
        Some(channel.to_owned())
    } else {
        chats.get(channel).map(|u| u.to_string())
    }
}

/// The -32600 refusal of a request on a connection not initialized.
fn not_initialized() -> ahp_types::messages::JsonRpcError {
    crate::protocol::error::error(crate::protocol::error::INVALID_REQUEST, "initialize first: the connection has not been initialized")
}

/// Where a process's `serverSeq` starts: the wall clock in ms times 1,000.
/// A restarted host so continues above every number the last process
/// stamped (unless it stamped more than 1,000 envelopes per ms of its life,
/// or the clock went back across the restart), and a client reconnecting
/// with a `lastSeenServerSeq` from before the restart is never replayed
/// another process's envelopes under numbers it already saw. Stays below
/// 2^53 (exact in a JavaScript client) until the year 2255.
fn server_seq_origin(wall: WallTime) -> u64 {
    u64::try_from(wall.0).unwrap_or(0).saturating_mul(1000)
}
