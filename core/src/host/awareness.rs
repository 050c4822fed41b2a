//! Workspace awareness wired into the host (issue 10; rules in
//! `crate::awareness`): publishing each live session's record, the
//! heartbeat, scans of the registry, peers and warnings on the session
//! state's `_meta`, the peer events, `ahpd/listPeers`, claims from
//! `BackendEvent::Wrote`, and the `coordinate` tier's hold on conflicting
//! writes.
//!
//! What ahp-types 1.0.0 has no shape for rides on the session state's
//! `_meta` (docs/DECISIONS.md, 1 and 11; `docs/AWARENESS.md`), set through
//! `session/metaChanged`, in a form whose size does not grow with the
//! peers (issue 21: each `session/metaChanged` carries the whole `_meta`,
//! is sent to every subscriber and kept in the replay buffer, and every
//! peer's change reaches every session of the folder): `ahpd.awareness`
//! (`{tier, error}`), `ahpd.peers` (`{count}`), `ahpd.awarenessWarnings`
//! (one summary per kind) and `ahpd.awarenessEvents` (the events the
//! change brings and only those, grouped by kind: the diff). The records,
//! the warnings one by one and the last [`EVENTS_KEPT`] events are answered
//! by `ahpd/listPeers`. The host keeps each live record once (`Arc`), every
//! session's peer set pointing at it.
//!
//! Reconciliation, not bookkeeping: after every input
//! [`Aware::tick`] compares each live session's record as it
//! would be now with the one last published, publishes what changed
//! (beyond the heartbeat stamp), removes records of sessions no longer
//! live (sleep, dispose), and on the heartbeat republishes everything and
//! rescans. A record is made only of its session (changed only through
//! the session table, which notes what it hands out to change), its claims
//! and its folder's repository, so between heartbeats the tick looks only
//! at the sessions the input touched and those whose claims or repository
//! moved: the same outcome as comparing every live session, at a cost
//! proportional to the input (issue 21).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use ahp_types::actions::{SessionMetaChangedAction, StateAction};
use ahp_types::Uri;
use serde_json::{json, Value};

use super::{Op, Shared};
use crate::config::Config;
use crate::session::table::SessionTable;
use crate::awareness::{self as rules, ActiveRecord, Liveness, PeerSet, Peers, RepoObservation, Tier, Warning};
use crate::effect::{ConnId, Effect, LogLevel, OpId, RegistryCmd};
use crate::input::Outcome;
use crate::ids::{printable, ResourceId};
use crate::protocol::error::{error, INVALID_PARAMS, SESSION_NOT_FOUND};
use crate::time::MonoTime;

/// How many recent awareness events a session keeps (answered by
/// `ahpd/listPeers`; also the most one change shows on `_meta`).
pub const EVENTS_KEPT: usize = 32;

/// One awareness event of a session (spec 004: a peer joined, updated or
/// left, or the registry failed). Kept typed and made JSON only when shown.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Event {
    /// Its number: rising across the host.
    seq: u64,
    /// `session_peer_joined`, `..._updated`, `..._left` or
    /// `session_awareness_error`.
    kind: &'static str,
    /// When (shown as ISO 8601).
    at: crate::time::WallTime,
    /// The peer's session URI and key, for a peer event.
    peer: Option<(String, Arc<str>)>,
    /// What failed, for an error.
    message: Option<Arc<str>>,
}

impl Event {
    /// As `ahpd/listPeers` answers it: `{type, peer?, key?, message?, seq,
    /// at}`.
    fn to_json(&self) -> Value {
        let mut obj = serde_json::Map::with_capacity(5);
        obj.insert("type".to_owned(), Value::from(self.kind));
        if let Some((session, key)) = &self.peer {
            obj.insert("peer".to_owned(), Value::from(session.as_str()));
            obj.insert("key".to_owned(), Value::from(&**key));
        }
        if let Some(message) = &self.message {
            obj.insert("message".to_owned(), Value::from(&**message));
        }
        obj.insert("seq".to_owned(), Value::from(self.seq));
        obj.insert("at".to_owned(), Value::String(self.at.to_iso()));
        Value::Object(obj)
    }
}

/// The peer events' kinds, in the order a change on `_meta` lists them.
const PEER_KINDS: [&str; 3] = ["session_peer_joined", "session_peer_updated", "session_peer_left"];

/// The events one change of a session's `_meta` brings, as it shows them
/// (`ahpd.awarenessEvents`): `{seq, at, session_peer_joined: [peer
/// session], session_peer_updated: [...], session_peer_left: [...],
/// session_awareness_error: message}`, the lists that are empty left out;
/// `seq` and `at` are the last event's; `{}` when it brings none. Grouped,
/// not one object per event: a change reaches every session of a folder
/// and is kept in the replay buffer, and an object per event cost ~0.9 KB
/// there (issue 21).
fn change_json(events: &[&Event]) -> Value {
    let Some(last) = events.last() else { return Value::Object(serde_json::Map::new()) };
    let groups: Vec<(&str, Vec<Value>)> = PEER_KINDS
        .iter()
        .map(|kind| (*kind, events.iter().filter(|e| e.kind == *kind).filter_map(|e| e.peer.as_ref()).map(|(session, _)| Value::from(session.as_str())).collect::<Vec<_>>()))
        .filter(|(_, peers)| !peers.is_empty())
        .collect();
    let error = events.iter().rev().find_map(|e| e.message.as_ref());
    let mut obj = serde_json::Map::with_capacity(2 + groups.len() + usize::from(error.is_some()));
    obj.insert("seq".to_owned(), Value::from(last.seq));
    obj.insert("at".to_owned(), Value::String(last.at.to_iso()));
    for (kind, mut peers) in groups {
        peers.shrink_to_fit();
        obj.insert(kind.to_owned(), Value::Array(peers));
    }
    if let Some(message) = error {
        obj.insert("session_awareness_error".to_owned(), Value::from(&**message));
    }
    Value::Object(obj)
}

/// A JSON object of exactly `pairs`, allocated to its size: `_meta` values
/// are kept in every `session/metaChanged` of the replay buffer (issue 21).
fn object<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    let mut obj = serde_json::Map::with_capacity(N);
    for (key, value) in pairs {
        obj.insert(key.to_owned(), value);
    }
    Value::Object(obj)
}

/// A session's recent events and how far its `_meta` has shown them.
#[derive(Debug, Clone, Default)]
struct Events {
    /// The last [`EVENTS_KEPT`], oldest first.
    kept: VecDeque<Event>,
    /// The last `seq` shown on `_meta`.
    shown_to: u64,
}

/// The host's awareness state.
#[derive(Debug, Clone, Default)]
pub struct Awareness {
    /// The record last published per session, with its file name.
    published: BTreeMap<Uri, (String, ActiveRecord)>,
    /// Claims per session: absolute paths its agent wrote while live.
    claims: BTreeMap<Uri, BTreeSet<String>>,
    /// The repository of each working directory, as last observed.
    repos: BTreeMap<String, Option<RepoObservation>>,
    /// The HEAD each session had when first observed live.
    baseline: BTreeMap<Uri, String>,
    /// The live records of the last scan (sanitised, not stale), by key,
    /// each as shown: a record that only refreshed its heartbeat stays the
    /// one seen before (spec 004, "heartbeat timestamp noise is ignored").
    /// The one copy of each that every session's peer set shares.
    live: Peers,
    /// Each session's peers as last computed (pointing into `live`); the
    /// sessions of one workspace share one map ([`PeerSet::share`]).
    peers: BTreeMap<Uri, PeerSet>,
    /// The workspace maps computed since the last scan, by their records'
    /// keys: where a session's fresh peer set finds the map the other
    /// sessions of its workspace share ([`PeerSet::share`]). Emptied at
    /// each scan (its records are new copies then).
    workspaces: BTreeMap<Vec<Arc<str>>, PeerSet>,
    /// Each session's warnings as last exposed.
    warnings: BTreeMap<Uri, Vec<Warning>>,
    /// Each session's recent events.
    events: BTreeMap<Uri, Events>,
    /// The last event number given.
    event_seq: u64,
    /// The scan in flight, if any.
    scan: Option<OpId>,
    /// When the last scan was started (`AwarenessConfig::scan_gap_ms`).
    last_scan_started: Option<MonoTime>,
    /// A scan was asked for within the gap: it starts when the gap ends
    /// ([`Awareness::scan_due`], derived, never stored).
    scan_held: bool,
    /// Whether another scan is owed once the one in flight ends.
    rescan_owed: bool,
    /// When the last heartbeat ran.
    last_heartbeat: Option<MonoTime>,
    /// The last registry error, until a scan succeeds.
    error: Option<String>,
    /// Record files already logged as skipped (logged once each).
    skipped: BTreeSet<String>,
    /// Each record file of the last scan that parsed, by name: its bytes
    /// and the record they gave, so that a file found unchanged is not
    /// parsed again ([`rules::parse_record_again`]).
    parsed: BTreeMap<String, (Vec<u8>, ActiveRecord)>,
    /// Sessions whose record may have moved outside the session table
    /// (claims written, their folder's repository observed anew) since the
    /// last tick: compared again by the next one.
    recheck: BTreeSet<Uri>,
}

impl Awareness {
    /// The peers of live session `uri` (other live records of its
    /// workspace), for what a session's own rules vet against them
    /// ([`crate::awareness::vet_declared_write`]).
    pub(crate) fn peers_of(&self, uri: &Uri) -> Option<&PeerSet> {
        self.peers.get(uri)
    }

    /// When the next heartbeat is due: only while awareness is on and this
    /// host has records published.
    pub(crate) fn deadline(&self, config: &Config) -> Option<MonoTime> {
        if !config.awareness.enabled {
            return None;
        }
        [self.heartbeat_deadline(config), self.scan_due(config)].into_iter().flatten().min()
    }

    /// When a scan held back by the gap starts: the gap after the last
    /// scan's start.
    fn scan_due(&self, config: &Config) -> Option<MonoTime> {
        let last = self.last_scan_started.filter(|_| self.scan_held)?;
        Some(last.plus_ms(config.awareness.scan_gap_ms))
    }

    /// When the next heartbeat is due: only while this host has records
    /// published.
    fn heartbeat_deadline(&self, config: &Config) -> Option<MonoTime> {
        if self.published.is_empty() {
            return None;
        }
        let period = config.awareness.heartbeat_ms.max(1);
        self.last_heartbeat.map(|t| t.plus_ms(period))
    }
}

/// Awareness at work for one input: what it may reach while it runs (its
/// own state, the session table — read, and a session's own channel to set
/// its `_meta` — the held set, and [`Shared`]). Made by
/// [`Host::aware`](super::Host::aware); nothing here reaches residency, the
/// requests or the trees.
pub(crate) struct Aware<'a> {
    pub(crate) state: &'a mut Awareness,
    pub(crate) sessions: &'a mut SessionTable,
    pub(crate) held: &'a BTreeSet<Uri>,
    pub(crate) shared: &'a mut Shared,
}

impl Aware<'_> {
    /// Whether awareness is on for this host.
    fn aware(&self) -> bool {
        self.shared.config.awareness.enabled
    }

    /// When the next heartbeat is due.
    fn awareness_deadline(&self) -> Option<MonoTime> {
        self.state.heartbeat_deadline(&self.shared.config)
    }

    /// Publishes what changed, removes what is no longer live, runs the
    /// heartbeat when due. Called after every input.
    pub(crate) fn tick(&mut self) {
        if !self.aware() {
            self.state.recheck.clear();
            return;
        }
        let heartbeat = self.awareness_deadline().is_some_and(|t| t <= self.shared.now.mono);
        // The sessions this input touched (the table forgets them as each
        // input begins; the tick runs at the end of every input).
        let touched: Option<std::collections::BTreeSet<Uri>> = self.sessions.touched().map(|t| t.into_iter().cloned().collect());
        let recheck = std::mem::take(&mut self.state.recheck);
        // Which sessions to look at, in URI order. At the end of every tick
        // each live session's published record equals the one it would
        // publish (beyond the stamp) and every published session is live;
        // only a session touched since, or one in `recheck`, can differ. The
        // heartbeat republishes every live session.
        let (live, gone): (Vec<Uri>, Vec<Uri>) = match touched {
            Some(mut uris) if !heartbeat => {
                uris.extend(recheck);
                let live = uris.iter().filter(|u| self.is_live(u)).cloned().collect();
                let gone = uris.into_iter().filter(|u| self.state.published.contains_key(u) && !self.is_live(u)).collect();
                (live, gone)
            }
            _ => {
                // Live sessions hold their state, so they are among `held`.
                let live = self.held.iter().filter(|u| self.sessions.get(u).is_some_and(|s| s.phase().is_live())).cloned().collect();
                let gone = self.state.published.keys().filter(|u| !self.is_live(u)).cloned().collect();
                (live, gone)
            }
        };
        let mut changed = false;
        for uri in &live {
            let Some(record) = self.own_record(uri) else { continue };
            let stale = match self.state.published.get(uri) {
                Some((_, old)) => heartbeat || old.differs_beyond_heartbeat(&record),
                None => true,
            };
            if stale {
                let Some(name) = self.record_name(uri) else { continue };
                let op = self.shared.new_op(Op::Registry { scan: false });
                self.shared.effects.push(Effect::Registry { op, command: RegistryCmd::Publish { name: name.clone(), record: Box::new(record.clone()) } });
                self.state.published.insert(uri.clone(), (name, record));
                changed = true;
            }
        }
        for uri in gone {
            if let Some((name, _)) = self.state.published.remove(&uri) {
                let op = self.shared.new_op(Op::Registry { scan: false });
                self.shared.effects.push(Effect::Registry { op, command: RegistryCmd::Remove { name } });
                changed = true;
            }
            self.state.claims.remove(&uri);
            self.state.baseline.remove(&uri);
            self.state.peers.remove(&uri);
            self.state.warnings.remove(&uri);
            self.expose(&uri);
        }
        // The heartbeat's period runs from the first publish, and stops while
        // nothing is published.
        if heartbeat || (self.state.last_heartbeat.is_none() && !self.state.published.is_empty()) {
            self.state.last_heartbeat = Some(self.shared.now.mono);
        }
        if self.state.published.is_empty() {
            self.state.last_heartbeat = None;
        }
        let scan_due = self.state.scan_due(&self.shared.config).is_some_and(|t| t <= self.shared.now.mono);
        if changed || heartbeat || scan_due {
            self.request_scan();
        }
    }

    /// Whether `uri` is a live session (live and holding its state): one
    /// that has a record in the registry.
    fn is_live(&self, uri: &Uri) -> bool {
        self.sessions.get(uri).is_some_and(|s| s.phase().is_live() && s.resident().is_some())
    }

    /// Starts a scan, or owes one when a scan is in flight, or sets one due
    /// when the last began less than `scan_gap_ms` ago.
    fn request_scan(&mut self) {
        if self.state.scan.is_some() {
            self.state.rescan_owed = true;
            return;
        }
        let now = self.shared.now.mono;
        let at = self.state.last_scan_started.map_or(now, |t| t.plus_ms(self.shared.config.awareness.scan_gap_ms).max(now));
        if at > now {
            crate::mark!("awareness_scan_debounced");
            self.state.scan_held = true;
            return;
        }
        self.state.scan_held = false;
        self.state.last_scan_started = Some(now);
        let mut dirs: BTreeSet<String> = BTreeSet::new();
        for (_, record) in self.state.published.values() {
            dirs.extend(record.working_directories.iter().take(1).cloned());
        }
        let op = self.shared.new_op(Op::Registry { scan: true });
        self.state.scan = Some(op);
        self.shared.effects.push(Effect::Registry { op, command: RegistryCmd::Scan { dirs: dirs.into_iter().collect() } });
    }

    /// The file name of `uri`'s record: `<pid>-<store key>.json`, both parts
    /// validated (docs/DECISIONS.md, 5).
    fn record_name(&self, uri: &Uri) -> Option<String> {
        let session = self.sessions.get(uri)?;
        let key = ResourceId::parse(uri).ok()?.store_key();
        (key == ResourceId::parse(&session.record().resource).ok()?.store_key()).then(|| format!("{}-{key}.json", self.shared.config.awareness.pid))
    }

    /// `uri`'s record as it stands now (stamped with the wall clock).
    fn own_record(&self, uri: &Uri) -> Option<ActiveRecord> {
        let session = self.sessions.get(uri)?;
        let dirs: Vec<String> = session.record().working_directories.iter().filter_map(|d| rules::uri_to_path(d)).collect();
        let repo = dirs.first().and_then(|d| self.state.repos.get(d)).cloned().flatten();
        let (status, activity) = session.status();
        Some(ActiveRecord {
            version: rules::RECORD_VERSION,
            session: uri.clone(),
            host: self.shared.config.host_name.clone(),
            pid: self.shared.config.awareness.pid,
            pid_start: self.shared.config.awareness.pid_start,
            working_directories: dirs,
            repository: repo.as_ref().map(|r| r.root.clone()),
            branch: repo.as_ref().and_then(|r| r.branch.clone()),
            head: repo.as_ref().and_then(|r| r.head.clone()),
            status,
            activity: rules::clean_text(&activity.unwrap_or_default(), rules::ACTIVITY_MAX_CHARS),
            claims: self.state.claims.get(uri).map(|c| c.iter().cloned().collect()).unwrap_or_default(),
            updated_at: self.shared.now.wall.0,
        })
    }

    /// A registry command finished.
    pub(crate) fn on_registry_done(&mut self, op: OpId, scan: bool, outcome: Outcome) {
        if scan && self.state.scan == Some(op) {
            self.state.scan = None;
        }
        match outcome {
            Outcome::RegistryScanned { files, repos } if scan => self.on_scanned_registry(files, repos),
            Outcome::Failed { message } => {
                let what = if scan { "could not read the registry" } else { "could not write the registry" };
                self.awareness_error(format!("{what}: {message}"));
            }
            _ => {}
        }
        if scan && std::mem::take(&mut self.state.rescan_owed) {
            self.request_scan();
        }
    }

    /// `session_awareness_error` on every live session (recoverable: the
    /// sessions go on; peers keep their last known value).
    fn awareness_error(&mut self, message: String) {
        crate::mark!("awareness_error");
        self.shared.log(LogLevel::Warn, "session_awareness_error", None, message.clone());
        self.state.error = Some(message.clone());
        let live: Vec<Uri> = self.state.published.keys().cloned().collect();
        let message: Arc<str> = Arc::from(message);
        for uri in live {
            self.push_event(&uri, "session_awareness_error", None, Some(Arc::clone(&message)));
            self.expose(&uri);
        }
    }

    fn on_scanned_registry(&mut self, files: Vec<rules::RegistryFile>, repos: BTreeMap<String, Option<RepoObservation>>) {
        let now_ms = self.shared.now.wall.0;
        self.state.workspaces.clear();
        let mut live = Peers::new();
        let mut parsed = BTreeMap::new();
        for file in files {
            let known = self.state.parsed.remove(&file.name).filter(|(bytes, _)| *bytes == file.bytes);
            let outcome = match &known {
                Some((_, record)) => rules::parse_record_again(record, now_ms),
                None => rules::parse_record(&file.bytes, now_ms),
            };
            match (&outcome, known) {
                (_, Some(known)) => {
                    parsed.insert(file.name.clone(), known);
                }
                (Ok(record), None) => {
                    parsed.insert(file.name.clone(), (file.bytes, record.clone()));
                }
                (Err(_), None) => {}
            }
            match outcome {
                Err(refusal) => self.note_skipped(&file.name, refusal.to_string()),
                Ok(record) => match rules::judge(&record, &self.shared.config.host_name, file.process.as_ref(), now_ms) {
                    Liveness::Live => {
                        self.state.skipped.remove(&file.name);
                        let key = record.key();
                        // The copy already shown stays while only its
                        // heartbeat moved: sessions keep pointing at it and
                        // nothing they show changes.
                        let (key, record) = match self.state.live.get_key_value(key.as_str()) {
                            Some((k, shown)) if !shown.differs_beyond_heartbeat(&record) => (Arc::clone(k), Arc::clone(shown)),
                            Some((k, _)) => (Arc::clone(k), Arc::new(record)),
                            None => (Arc::from(key), Arc::new(record)),
                        };
                        live.insert(key, record);
                    }
                    Liveness::Stale(why) => self.note_skipped(&file.name, format!("stale: {why}")),
                },
            }
        }
        // A published record carries its first folder's repository: one
        // observed anew is a reason to compare that record again.
        let moved: BTreeSet<&String> = repos.iter().filter(|(dir, obs)| self.state.repos.get(*dir) != Some(*obs)).map(|(dir, _)| dir).collect();
        if !moved.is_empty() {
            for (uri, (_, record)) in &self.state.published {
                if record.working_directories.first().is_some_and(|d| moved.contains(d)) {
                    self.state.recheck.insert(uri.clone());
                }
            }
        }
        self.state.repos.extend(repos);
        self.state.live = live;
        self.state.parsed = parsed;
        // A cleared error is news for every session, even one whose peers
        // stayed.
        let error_cleared = self.state.error.take().is_some();
        let sessions: Vec<Uri> = self.state.published.keys().cloned().collect();
        for uri in sessions {
            self.refresh_peers(&uri, error_cleared);
        }
    }

    fn note_skipped(&mut self, name: &str, why: String) {
        if self.state.skipped.insert(name.to_owned()) {
            crate::mark!("awareness_record_skipped");
            self.shared.log(LogLevel::Info, "awareness.record_skipped", None, format!("{}: {why}", printable(name)));
        }
    }

    /// Recomputes `uri`'s peers and warnings from the last scan, records
    /// the peer events, and exposes them when anything a client sees moved
    /// (or `force`).
    fn refresh_peers(&mut self, uri: &Uri, force: bool) {
        let Some(me) = self.own_record(uri) else { return };
        if let Some(head) = me.head.clone() {
            self.state.baseline.entry(uri.clone()).or_insert(head);
        }
        // A peer that only refreshed its heartbeat is the record shown
        // before (`Awareness::live`): no event, nothing re-sent.
        let mut fresh = rules::peers_of(&me, &self.state.live);
        let had = self.state.peers.remove(uri);
        self.share_workspace(&mut fresh, had.as_ref());
        let force = force || had.is_none();
        let old = had.unwrap_or_default();
        let events = rules::diff(&old, &fresh);
        for (kind, key) in &events {
            let peer = fresh.get(key).or_else(|| old.get(key));
            let session = peer.map(|p| p.session.clone()).unwrap_or_default();
            self.shared.log(LogLevel::Info, kind.name(), Some(uri.clone()), format!("peer {}", printable(key)));
            self.push_event(uri, kind.name(), Some((session, Arc::clone(key))), None);
        }
        let tier = self.sessions.get(uri).map(|s| Tier::of_config(&s.record().config)).unwrap_or_default();
        let warnings = rules::warnings(tier, &me, self.state.baseline.get(uri).map(String::as_str), &fresh);
        let before = self.state.warnings.get(uri).cloned().unwrap_or_default();
        for w in warnings.iter().filter(|w| !before.contains(w)) {
            crate::mark!("awareness_warning");
            self.shared.log(LogLevel::Warn, "awareness.warning", Some(uri.clone()), w.message.clone());
        }
        // `_meta` shows the peers' count, the events and the warnings'
        // summary: a peer set that moved without an event (a peer's branch,
        // say) changes none of them.
        let unchanged = !force && events.is_empty() && warnings == before;
        self.state.peers.insert(uri.clone(), fresh);
        self.state.warnings.insert(uri.clone(), warnings);
        if !unchanged {
            self.expose(uri);
        }
    }

    /// Makes `fresh` share its workspace map with the one the sessions of
    /// its workspace share since the last scan, or else with the session's
    /// last peer set when it holds the same records; the map is remembered
    /// for the workspace's next sessions.
    fn share_workspace(&mut self, fresh: &mut PeerSet, had: Option<&PeerSet>) {
        let keys = fresh.workspace_keys();
        if self.state.workspaces.get(&keys).is_some_and(|known| fresh.share(known)) {
            return;
        }
        if let Some(had) = had {
            fresh.share(had);
        }
        self.state.workspaces.insert(keys, fresh.clone());
    }

    fn push_event(&mut self, uri: &Uri, kind: &'static str, peer: Option<(String, Arc<str>)>, message: Option<Arc<str>>) {
        self.state.event_seq += 1;
        let event = Event { seq: self.state.event_seq, kind, at: self.shared.now.wall, peer, message };
        let events = &mut self.state.events.entry(uri.clone()).or_default().kept;
        // Room made first, so the buffer never grows past its bound.
        while events.len() >= EVENTS_KEPT {
            events.pop_front();
        }
        events.push_back(event);
    }

    /// What `uri`'s `_meta` carries about awareness: nothing that grows
    /// with its peers (the module's doc). The events are those from `seq`
    /// `new_from` on (none without).
    fn awareness_meta(&self, uri: &Uri, new_from: Option<u64>) -> [(&'static str, Value); 4] {
        let tier = self.sessions.get(uri).map(|s| Tier::of_config(&s.record().config)).unwrap_or_default();
        let count = self.state.peers.get(uri).map_or(0, PeerSet::len);
        let warnings: &[Warning] = self.state.warnings.get(uri).map(Vec::as_slice).unwrap_or_default();
        let events: Vec<&Event> = match (self.state.events.get(uri), new_from) {
            (Some(e), Some(from)) => e.kept.iter().filter(|ev| ev.seq >= from).collect(),
            _ => Vec::new(),
        };
        [
            ("ahpd.awareness", object([("tier", Value::from(tier.name())), ("error", self.state.error.as_deref().map_or(Value::Null, Value::from))])),
            ("ahpd.peers", object([("count", Value::from(count))])),
            ("ahpd.awarenessWarnings", serde_json::to_value(rules::summarize(warnings)).unwrap_or_default()),
            (rules::EVENTS_META_KEY, change_json(&events)),
        ]
    }

    /// Sets `uri`'s awareness `_meta` keys through `session/metaChanged`
    /// when they moved (a resident session only).
    fn expose(&mut self, uri: &Uri) {
        if self.sessions.get(uri).and_then(|s| s.resident()).is_none() {
            return;
        }
        // The events `_meta` has not shown yet ride on this change, each on
        // one change only (a diff: a `_meta` change carries the events it
        // brings, or none); a client that missed some asks `ahpd/listPeers`
        // for the last few.
        let new_from = self.state.events.get_mut(uri).and_then(|events| {
            let last = events.kept.back().map_or(0, |e| e.seq);
            let from = events.shown_to + 1;
            (last >= from).then(|| {
                events.shown_to = last;
                from
            })
        });
        let Some(resident) = self.sessions.get(uri).and_then(|s| s.resident()) else { return };
        let fresh = self.awareness_meta(uri, new_from);
        let current = resident.session.meta.as_ref();
        // Most calls change nothing: the whole `_meta` is copied only when
        // a key moved or events came (a scan calls this for every live
        // session). Events already shown are not shown again.
        let same = |key: &str, value: &Value| current.and_then(|m| m.get(key)) == Some(value);
        if new_from.is_none() && current.is_some_and(|m| m.contains_key(rules::EVENTS_META_KEY)) && fresh.iter().filter(|(k, _)| *k != rules::EVENTS_META_KEY).all(|(k, v)| same(k, v))
        {
            return;
        }
        // The `_meta` as it was with the four keys set: each in its place,
        // the missing ones after the rest in this order. The values they
        // replace are not copied only to be dropped.
        let mut fresh = fresh.map(|(key, value)| (key, Some(value)));
        let missing = fresh.iter().filter(|(key, _)| !current.is_some_and(|m| m.contains_key(*key))).count();
        let mut meta = serde_json::Map::with_capacity(current.map_or(0, serde_json::Map::len) + missing);
        for (key, value) in current.into_iter().flatten() {
            let value = match fresh.iter_mut().find(|(k, _)| k == key) {
                Some((_, mine)) => mine.take().unwrap_or_default(),
                None => value.clone(),
            };
            meta.insert(key.clone(), value);
        }
        for (key, value) in fresh {
            if let Some(value) = value {
                meta.insert(key.to_owned(), value);
            }
        }
        let action = StateAction::SessionMetaChanged(SessionMetaChangedAction { meta: Some(meta) });
        if let Some(session) = self.sessions.get_mut(uri) {
            session.emit(self.shared, uri, action, None);
        }
    }

    /// The agent of one of `session_uri`'s chats wrote `paths`: they become
    /// the session's claims (at most `CLAIMS_MAX`), published by the next
    /// tick.
    pub(crate) fn on_wrote(&mut self, session_uri: &Uri, paths: Vec<String>) {
        let base = self.sessions.get(session_uri).and_then(|s| s.record().working_directories.first()).and_then(|d| rules::uri_to_path(d));
        self.state.recheck.insert(session_uri.clone());
        let claims = self.state.claims.entry(session_uri.clone()).or_default();
        for path in paths.iter().filter_map(|p| rules::join(base.as_deref(), &rules::clean_text(p, rules::TEXT_MAX_CHARS))) {
            if claims.len() >= rules::CLAIMS_MAX {
                break;
            }
            claims.insert(path);
        }
    }

    /// `ahpd/listPeers {channel}`: the session's peers (other live records
    /// of its workspace), its warnings one by one, its last events and
    /// tier ([`answer`]). Needs `session:peers` (a
    /// read). Errors: -32602 for a malformed URI, -32001 for an unknown
    /// session.
    pub(crate) fn on_list_peers(&mut self, conn: ConnId, id: u64, params: Value) {
        if let Err(e) = self.shared.authorize(conn, crate::grants::Operation::SessionPeers) {
            return self.shared.reply_error(conn, id, e);
        }
        let Some(channel) = params.get("channel").and_then(|c| c.as_str()).map(str::to_owned) else {
            return self.shared.reply_error(conn, id, error(INVALID_PARAMS, "invalid params: channel (a session URI) is required"));
        };
        if let Err(e) = ResourceId::parse(&channel) {
            return self.shared.reply_error(conn, id, error(INVALID_PARAMS, format!("invalid session URI: {e}")));
        }
        if !self.sessions.contains_key(&channel) {
            return self.shared.reply_error(conn, id, error(SESSION_NOT_FOUND, format!("no session {channel}")));
        }
        let result = answer(self.state, self.sessions, &self.shared.config, &channel);
        self.shared.reply(conn, id, result);
    }
}

/// What `ahpd/listPeers` answers for `uri`: `{enabled, tier, error, peers,
/// warnings, events}` — the peer records in key order, the warnings one by
/// one, the last [`EVENTS_KEPT`] events. What `_meta` shows in short
/// (`ahpd.peers` is the count of `peers`, `ahpd.awarenessWarnings` the
/// summary of `warnings`). Read only: the simulator's checkers ask it too
/// ([`HostView::peers_answer`](crate::HostView::peers_answer)).
pub(crate) fn answer(state: &Awareness, sessions: &SessionTable, config: &Config, uri: &Uri) -> Value {
    let tier = sessions.get(uri).map(|s| Tier::of_config(&s.record().config)).unwrap_or_default();
    let peers: Vec<&ActiveRecord> = state.peers.get(uri).map(|p| p.values().map(|r| &**r).collect()).unwrap_or_default();
    let warnings: &[Warning] = state.warnings.get(uri).map(Vec::as_slice).unwrap_or_default();
    let events: Vec<Value> = state.events.get(uri).map(|e| e.kept.iter().map(Event::to_json).collect()).unwrap_or_default();
    json!({
        "enabled": config.awareness.enabled,
        "tier": tier.name(),
        "error": state.error,
        "peers": serde_json::to_value(peers).unwrap_or_default(),
        "warnings": serde_json::to_value(warnings).unwrap_or_default(),
        "events": events,
    })
}
