//! Workspace-awareness rules (spec 004, "Coordinate concurrent sessions";
//! `docs/AWARENESS.md`), checked against the simulated registry's truth
//! ([`crate::registry`]). Each rule is restated here from the spec, not
//! taken from the core's helpers, except the path grammar.
//!
//! - `awareness_peers_match_registry`: after a scan, the peers a live
//!   session reports (the records `ahpd/listPeers` answers,
//!   [`HostView::peers_answer`]) are exactly the other live records in its
//!   folders: well-formed, their writer running, refreshed within the
//!   expiry and not dated in the future, excluding its own; its `_meta`
//!   counts them (`ahpd.peers.count`).
//! - `awareness_peer_events`: the events a scan logs for a session are
//!   `session_peer_joined` for each peer that appeared, `..._updated` for
//!   each whose status, activity or claims changed (never for heartbeat
//!   stamp noise), `..._left` for each that disappeared; nothing else; and
//!   the session's `_meta` then shows exactly those (the last 32), in that
//!   order (`ahpd.awarenessEvents`: each event rides on one change).
//! - `awareness_error_recoverable`: a failed scan marks every live session
//!   with `session_awareness_error` (its `_meta` shows the event) and its
//!   `ahpd.awareness.error`, leaves its peers as they were; the next good
//!   scan clears the error.
//! - `awareness_tier_warnings`: the `passive` tier shows no warnings; the
//!   others warn of exactly the peers whose claims overlap the session's
//!   (`ahpd/listPeers`, one by one), and `_meta` shows them counted by
//!   kind (`ahpd.awarenessWarnings`).
//! - `awareness_tier_writes`: a declared write to a path a peer claims is
//!   held for a person (the permission flow) exactly at the `coordinate`
//!   tier without auto-approve; `warn` goes on with a warning and no pause;
//!   `passive` says nothing; an unclaimed write is confirmed at once.
//! - `awareness_record_lifetime`: after every step the records this host
//!   process has in the registry are exactly those of its live resident
//!   sessions (a sleeping or disposed session's record is removed).
//! - `awareness_tier_stable`: a session's tier never changes during its
//!   life, across host restarts too (its config is not mutable).

use std::collections::{BTreeMap, BTreeSet};

use ahp_types::actions::StateAction;
use ahp_types::Uri;
use ahpd_core::awareness::{self, Tier, EXPIRE_AFTER_MS, FUTURE_TOLERANCE_MS};
use ahpd_core::invariants::Violation;
use ahpd_core::{BackendCmd, BackendEvent, Effect, HostView, Input};
use serde_json::Value;

use crate::registry::{Registry, ScanTruth, HOST_NAME};

/// How many of a change's events a session's `_meta` shows at most (the
/// host keeps as many: `EVENTS_KEPT`).
const EVENTS_SHOWN: usize = 32;

fn breach(rule: &'static str, detail: String) -> Violation {
    Violation { rule, detail }
}

/// The exposed peers of one session: key → record (JSON as on the wire).
type Peers = BTreeMap<String, Value>;

/// What the awareness checker remembers between steps.
#[derive(Debug, Clone, Default)]
pub struct AwarenessChecker {
    /// Each session's tier since it was first seen (per URI life).
    tiers: BTreeMap<Uri, Tier>,
    /// The repository of each folder, as the scans of this host
    /// incarnation answered.
    repos: BTreeMap<String, Option<awareness::RepoObservation>>,
    /// Counters for the run summary.
    pub stats: AwarenessStats,
}

/// What the checker saw (coverage of its rules).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AwarenessStats {
    /// Peer sets compared after a scan.
    pub peer_sets: u64,
    /// Non-empty peer sets among them.
    pub nonempty_peer_sets: u64,
    /// Declared writes vetted.
    pub writes: u64,
    /// Declared writes held for a person (coordinate tier).
    pub held: u64,
}

/// What a step's checks need from before it.
#[derive(Debug, Clone, Default)]
pub struct AwarenessBefore {
    /// The step answers a registry scan: its truth.
    scan: Option<ScanTruth>,
    /// Exposed peers of each live resident session before the step.
    peers: BTreeMap<Uri, Peers>,
    /// A declared write being vetted: (session, chat, paths declared).
    write: Option<(Uri, Uri, Vec<String>)>,
}

fn meta<'a>(view: &'a HostView<'_>, uri: &str) -> Option<&'a serde_json::Map<String, Value>> {
    let s = view.sessions.get(uri)?;
    if !s.phase().is_live() {
        return None;
    }
    s.resident()?.session.meta.as_ref()
}

fn key_of(record: &Value) -> String {
    let s = |k: &str| record.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
    format!("{}#{}@{}", s("session"), record.get("pid").and_then(Value::as_u64).unwrap_or(0), s("host"))
}

/// What `ahpd/listPeers` answers for a live resident session (`Null`
/// otherwise).
fn listed(view: &HostView<'_>, uri: &str) -> Value {
    if meta(view, uri).is_none() {
        return Value::Null;
    }
    view.peers_answer(uri).unwrap_or(Value::Null)
}

/// The peers a live resident session reports: the records `ahpd/listPeers`
/// answers (its `_meta` only counts them).
fn exposed_peers(view: &HostView<'_>, uri: &str) -> Peers {
    let Some(Value::Array(items)) = listed(view, uri).get("peers").cloned() else { return Peers::new() };
    items.iter().map(|r| (key_of(r), r.clone())).collect()
}

/// The `(kind, peer session)` of the peer events a session's `_meta`
/// shows (those its latest change brought, grouped by kind), sorted.
fn shown_events(m: &serde_json::Map<String, Value>) -> Vec<(String, String)> {
    let Some(Value::Object(change)) = m.get("ahpd.awarenessEvents") else { return Vec::new() };
    let mut out: Vec<(String, String)> = Vec::new();
    for kind in ["session_peer_joined", "session_peer_updated", "session_peer_left"] {
        for peer in strings(change.get(kind)) {
            out.push((kind.to_owned(), peer));
        }
    }
    out.sort();
    out
}

/// Whether a session's `_meta` shows a registry error event.
fn shows_error(m: &serde_json::Map<String, Value>) -> bool {
    m.get("ahpd.awarenessEvents").and_then(|c| c.get("session_awareness_error")).is_some_and(Value::is_string)
}

fn strings(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::Array(items)) => items.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect(),
        _ => Vec::new(),
    }
}

/// Whether one absolute path is the other or inside it.
fn overlaps(a: &str, b: &str) -> bool {
    let inside = |x: &str, y: &str| x == y || y.strip_prefix(x).is_some_and(|rest| rest.starts_with('/'));
    inside(a, b) || inside(b, a)
}

fn live_resident<'a>(view: &'a HostView<'_>) -> impl Iterator<Item = &'a Uri> {
    view.sessions.iter().filter(|(_, s)| s.phase().is_live() && s.resident().is_some()).map(|(u, _)| u)
}

fn folders(view: &HostView<'_>, uri: &str) -> Vec<String> {
    view.sessions
        .get(uri)
        .map(|s| s.record().working_directories.iter().filter_map(|d| awareness::uri_to_path(d)).collect())
        .unwrap_or_default()
}

impl AwarenessChecker {
    /// A host (re)started: what it learnt of repositories is gone.
    pub fn on_host_start(&mut self) {
        self.repos.clear();
    }

    /// Notes what a step's checks compare against; `truth` is the scan
    /// the input answers, if it does.
    pub fn before_step(&self, view: &HostView<'_>, input: &Input, truth: Option<ScanTruth>) -> AwarenessBefore {
        let mut before = AwarenessBefore { scan: truth, ..AwarenessBefore::default() };
        let write = match input {
            Input::Backend { chat, event: BackendEvent::Action(StateAction::ChatToolCallReady(a)) } => a
                .meta
                .as_ref()
                .and_then(|m| m.get(awareness::WRITES_META_KEY))
                .map(|w| (view.chats.get(chat).map(|u| u.to_string()).unwrap_or_default(), chat.clone(), strings(Some(w)))),
            _ => None,
        };
        if before.scan.is_some() {
            before.peers = live_resident(view).map(|u| (u.clone(), exposed_peers(view, u))).collect();
        } else if let Some((session, _, _)) = &write {
            before.peers.insert(session.clone(), exposed_peers(view, session));
        }
        before.write = write;
        before
    }

    /// After a step (its effects routed): every awareness rule.
    pub fn after_step(&mut self, view: &HostView<'_>, before: AwarenessBefore, effects: &[Effect], registry: &Registry) -> Result<(), Violation> {
        if !view.config.awareness.enabled {
            return Ok(());
        }
        self.check_lifetime(view, registry)?;
        self.check_tiers(view)?;
        let logs: Vec<(&'static str, Option<&Uri>, &str)> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::Log(l) => Some((l.event, l.session.as_ref(), l.detail.as_str())),
                _ => None,
            })
            .collect();
        if let Some((session, chat, paths)) = &before.write {
            self.check_write(view, &before, session, chat, paths, &logs, effects)?;
        }
        match &before.scan {
            Some(truth) if truth.failed => self.check_failed_scan(view, &before, &logs)?,
            Some(truth) => self.check_scan(view, &before, truth, &logs, registry)?,
            None => {}
        }
        Ok(())
    }

    fn check_lifetime(&self, view: &HostView<'_>, registry: &Registry) -> Result<(), Violation> {
        let own = registry.own_files();
        let mut published: BTreeSet<&str> = BTreeSet::new();
        for (name, session) in own {
            let live = view.sessions.get(session).is_some_and(|s| s.phase().is_live() && s.resident().is_some());
            if !live {
                let phase = view.sessions.get(session).map_or("gone", |s| s.phase().name());
                return Err(breach("awareness_record_lifetime", format!("{name}: the record of {session} ({phase}) is still in the registry")));
            }
            published.insert(session);
        }
        if let Some(uri) = live_resident(view).find(|u| !published.contains(u.as_str())) {
            return Err(breach("awareness_record_lifetime", format!("{uri} is live and has no record in the registry")));
        }
        Ok(())
    }

    fn check_tiers(&mut self, view: &HostView<'_>) -> Result<(), Violation> {
        self.tiers.retain(|u, _| view.sessions.contains_key(u));
        for (uri, s) in view.sessions.iter() {
            let tier = Tier::of_config(&s.record().config);
            match self.tiers.get(uri) {
                Some(t) if *t != tier => {
                    return Err(breach("awareness_tier_stable", format!("{uri} was at the {} tier and is now at {}", t.name(), tier.name())));
                }
                Some(_) => {}
                None => {
                    self.tiers.insert(uri.clone(), tier);
                }
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn check_write(
        &mut self,
        view: &HostView<'_>,
        before: &AwarenessBefore,
        session: &Uri,
        chat: &Uri,
        paths: &[String],
        logs: &[(&'static str, Option<&Uri>, &str)],
        effects: &[Effect],
    ) -> Result<(), Violation> {
        let Some(s) = view.sessions.get(session) else { return Ok(()) };
        let held = logs.iter().any(|(e, u, _)| *e == "awareness.write_held" && *u == Some(session));
        let warned = logs.iter().any(|(e, u, _)| *e == "awareness.write_conflict" && *u == Some(session));
        let confirmed = effects.iter().any(|e| matches!(e, Effect::Backend { chat: c, command: BackendCmd::ConfirmTool { .. }, .. } if c == chat));
        if !held && !confirmed {
            // Not the running turn's: the host dropped it.
            return Ok(());
        }
        self.stats.writes += 1;
        let tier = Tier::of_config(&s.record().config);
        let auto = awareness::auto_approve(&s.record().config);
        let base = folders(view, session).into_iter().next();
        let targets: Vec<String> = paths.iter().filter_map(|p| awareness::join(base.as_deref(), p)).collect();
        let peers = before.peers.get(session).cloned().unwrap_or_default();
        let conflict = peers.values().any(|p| strings(p.get("claims")).iter().any(|c| targets.iter().any(|t| overlaps(c, t))));
        let expect_held = tier == Tier::Coordinate && !auto && conflict;
        if held != expect_held || confirmed == held {
            return Err(breach("awareness_tier_writes", format!(
                "{session} ({} tier, autoApprove={auto}) wrote {targets:?} with peers claiming {}: held={held} confirmed={confirmed}, expected held={expect_held}",
                tier.name(),
                if conflict { "some" } else { "none" }
            )));
        }
        let expect_warned = conflict && tier != Tier::Passive && !expect_held;
        if warned != expect_warned {
            return Err(breach("awareness_tier_writes", format!(
                "{session} ({} tier) wrote {targets:?}: conflict warning logged={warned}, expected {expect_warned}",
                tier.name()
            )));
        }
        if held {
            self.stats.held += 1;
        }
        Ok(())
    }

    fn check_failed_scan(&self, view: &HostView<'_>, before: &AwarenessBefore, logs: &[(&'static str, Option<&Uri>, &str)]) -> Result<(), Violation> {
        if !logs.iter().any(|(e, _, _)| *e == "session_awareness_error") {
            return Err(breach("awareness_error_recoverable", "a failed scan logged no session_awareness_error".to_owned()));
        }
        for (uri, old) in &before.peers {
            let Some(m) = meta(view, uri) else { continue };
            if m.get("ahpd.awareness").and_then(|a| a.get("error")).is_none_or(Value::is_null) {
                return Err(breach("awareness_error_recoverable", format!("{uri} shows no registry error after a failed scan")));
            }
            if !shows_error(m) {
                return Err(breach("awareness_error_recoverable", format!("{uri}'s _meta shows no session_awareness_error after a failed scan: {:?}", m.get("ahpd.awarenessEvents"))));
            }
            let now = exposed_peers(view, uri);
            if now.keys().ne(old.keys()) {
                return Err(breach("awareness_error_recoverable", format!("{uri}'s peers changed on a failed scan: {:?} -> {:?}", old.keys(), now.keys())));
            }
        }
        Ok(())
    }

    fn check_scan(
        &mut self,
        view: &HostView<'_>,
        before: &AwarenessBefore,
        truth: &ScanTruth,
        logs: &[(&'static str, Option<&Uri>, &str)],
        registry: &Registry,
    ) -> Result<(), Violation> {
        self.repos.extend(truth.repos.clone());
        let now_ms = view.now.wall.0;
        let (pid, _) = registry.host_process();
        let live: Vec<&awareness::ActiveRecord> = truth
            .live
            .iter()
            .filter(|r| now_ms.saturating_sub(r.updated_at) <= EXPIRE_AFTER_MS && r.updated_at <= now_ms.saturating_add(FUTURE_TOLERANCE_MS))
            .collect();
        let sessions: Vec<Uri> = live_resident(view).cloned().collect();
        for uri in &sessions {
            let Some(m) = meta(view, uri) else { continue };
            if m.get("ahpd.awareness").and_then(|a| a.get("error")).is_some_and(|e| !e.is_null()) {
                return Err(breach("awareness_error_recoverable", format!("{uri} still shows a registry error after a good scan")));
            }
            // Expected peers: the other live records of its workspace.
            let dirs = folders(view, uri);
            let repo = dirs.first().and_then(|d| self.repos.get(d).cloned().flatten()).map(|r| r.root);
            let expected: BTreeSet<String> = live
                .iter()
                .filter(|r| !(r.session == *uri && r.pid == pid && r.host == HOST_NAME))
                .filter(|r| (repo.is_some() && r.repository == repo) || r.working_directories.iter().any(|x| dirs.iter().any(|y| overlaps(x, y))))
                .map(|r| r.key())
                .collect();
            let got = exposed_peers(view, uri);
            self.stats.peer_sets += 1;
            if !got.is_empty() {
                self.stats.nonempty_peer_sets += 1;
            }
            if got.keys().ne(expected.iter()) {
                return Err(breach("awareness_peers_match_registry", format!(
                    "{uri} (folders {dirs:?}) reports peers {:?}; the registry's other live records there are {expected:?}",
                    got.keys().collect::<Vec<_>>()
                )));
            }
            let count = m.get("ahpd.peers").and_then(|p| p.get("count")).and_then(Value::as_u64);
            if count != Some(got.len() as u64) {
                return Err(breach("awareness_peers_match_registry", format!("{uri}'s _meta counts {count:?} peers; it reports {}", got.len())));
            }
            // Events: the difference between what it showed and shows.
            let old = before.peers.get(uri).cloned().unwrap_or_default();
            let mut want: Vec<(&str, String)> = Vec::new();
            for (key, record) in &got {
                match old.get(key) {
                    None => want.push(("session_peer_joined", key.clone())),
                    Some(was) if ["status", "activity", "claims"].iter().any(|f| was.get(*f) != record.get(*f)) => want.push(("session_peer_updated", key.clone())),
                    Some(_) => {}
                }
            }
            for key in old.keys().filter(|k| !got.contains_key(*k)) {
                want.push(("session_peer_left", key.clone()));
            }
            let mut logged: Vec<(&str, String)> = logs
                .iter()
                .filter(|(e, u, _)| *u == Some(uri) && matches!(*e, "session_peer_joined" | "session_peer_updated" | "session_peer_left"))
                .map(|(e, _, d)| (*e, d.strip_prefix("peer ").unwrap_or(d).to_owned()))
                .collect();
            // The events the scan brought ride on `_meta` (the last 32 of
            // them, as logged), each naming its peer's session.
            if !logged.is_empty() {
                let session_of = |key: &str| {
                    got.iter().chain(old.iter()).find(|(k, _)| ahpd_core::ids::printable(k) == key).and_then(|(_, r)| r.get("session")).and_then(Value::as_str).unwrap_or_default().to_owned()
                };
                let mut tail: Vec<(String, String)> =
                    logged.iter().skip(logged.len().saturating_sub(EVENTS_SHOWN)).map(|(e, k)| ((*e).to_owned(), session_of(k))).collect();
                tail.sort();
                let seq = m.get("ahpd.awarenessEvents").and_then(|c| c.get("seq")).and_then(Value::as_u64);
                if shown_events(m) != tail || seq.is_none() {
                    return Err(breach("awareness_peer_events", format!(
                        "{uri}: the scan logged {tail:?}; its _meta shows the events {:?}",
                        m.get("ahpd.awarenessEvents")
                    )));
                }
            }
            want.sort();
            logged.sort();
            if want != logged {
                return Err(breach("awareness_peer_events", format!("{uri}: the scan logged {logged:?}; its peers moved by {want:?}")));
            }
            // Warnings by tier.
            let tier = Tier::of_config(&view.sessions.get(uri).map(|s| s.record().config.clone()).unwrap_or_default());
            let warnings = match listed(view, uri).get("warnings") {
                Some(Value::Array(w)) => w.clone(),
                _ => Vec::new(),
            };
            // `_meta` counts them by kind, in kind order.
            let mut by_kind: Vec<(String, u64)> = Vec::new();
            for w in &warnings {
                let kind = w.get("kind").and_then(Value::as_str).unwrap_or_default().to_owned();
                match by_kind.last_mut() {
                    Some((k, n)) if *k == kind => *n += 1,
                    _ => by_kind.push((kind, 1)),
                }
            }
            let summary: Vec<(String, u64)> = match m.get("ahpd.awarenessWarnings") {
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|w| (w.get("kind").and_then(Value::as_str).unwrap_or_default().to_owned(), w.get("count").and_then(Value::as_u64).unwrap_or(0)))
                    .collect(),
                _ => Vec::new(),
            };
            if summary != by_kind {
                return Err(breach("awareness_tier_warnings", format!("{uri}'s _meta sums up its warnings as {summary:?}; they are {by_kind:?}")));
            }
            if tier == Tier::Passive {
                if !warnings.is_empty() {
                    return Err(breach("awareness_tier_warnings", format!("{uri} is passive and shows warnings {warnings:?}")));
                }
                continue;
            }
            let mine = registry.own_record(uri).map(|r| r.claims).unwrap_or_default();
            let expected: BTreeSet<String> = got
                .values()
                .filter(|p| strings(p.get("claims")).iter().any(|c| mine.iter().any(|x| overlaps(c, x))))
                .map(|p| p.get("session").and_then(Value::as_str).unwrap_or_default().to_owned())
                .collect();
            let shown: BTreeSet<String> = warnings
                .iter()
                .filter(|w| w.get("kind").and_then(Value::as_str) == Some("pathOverlap"))
                .map(|w| w.get("peer").and_then(Value::as_str).unwrap_or_default().to_owned())
                .collect();
            if shown != expected {
                return Err(breach("awareness_tier_warnings", format!(
                    "{uri} ({} tier, claims {mine:?}) warns of overlap with {shown:?}; the peers claiming its paths are {expected:?}",
                    tier.name()
                )));
            }
        }
        Ok(())
    }
}
