//! Resource watches (issue 48): `createResourceWatch` allocates an
//! `ahp-resource-watch:/<n>` channel over a folder the connection may read;
//! subscribing to it answers its [`ResourceWatchState`]; the shell's batches
//! (`Input::FsChanged`) go out as `resourceWatch/changed` actions through
//! `Shared::fan_out` (so `serverSeq` and `reconnect`'s replay hold for them).
//!
//! The rules: a batch reports only paths inside the watch's root (for a
//! watch that is not recursive, the root and its direct children) and
//! inside the folders the principal could read when the watch was made,
//! and not left out by its `excludes` / `includes` ([`WatchFilter`]);
//! each path at most once per action (its last change), never an empty
//! action, at most `watch_batch_max` changes an action. A watch ends
//! (`FsCmd::Unwatch`) when its last subscriber unsubscribes or goes, when
//! the connection that made it goes before anyone subscribed, or when the
//! last session whose folder it is in is disposed.

use std::collections::{BTreeMap, BTreeSet};

use ahp_types::actions::{ResourceWatchChangedAction, StateAction};
use ahp_types::commands::{CreateResourceWatchResult, SubscribeResult};
use ahp_types::state::{ResourceChange, ResourceChangeType, ResourceWatchState, Snapshot, SnapshotState};
use ahp_types::Uri;

use super::fs::{FsCmd, FsResult};
use super::path::{inside, is_clean, within};
use super::requests::{FileReq, Pending, Step};
use super::{FileWork, Files, FilesOut};
use crate::effect::{ConnId, LogLevel};
use crate::protocol::error::{error, NOT_FOUND};

/// The scheme of a watch's channel (`ahp-resource-watch:/<n>`).
pub const WATCH_SCHEME: &str = "ahp-resource-watch:";

/// Whether `uri` is a resource watch's channel.
pub fn is_watch_channel(uri: &str) -> bool {
    uri.starts_with(WATCH_SCHEME)
}

/// Most patterns one of a watch's `excludes` or `includes` holds (100).
pub const FILTER_PATTERNS_MAX: usize = 100;

/// Longest pattern, in bytes (1,024).
pub const FILTER_PATTERN_MAX_BYTES: usize = 1024;

/// A watch's `excludes` and `includes` (`CreateResourceWatchParams`): glob
/// patterns or plain paths relative to the watched folder, each list as
/// `{items: [..]}` (a bare array is taken too). `*` stays within one name,
/// `**` crosses folders. A change is left out when an exclude matches its
/// path relative to the root or any folder above it (`node_modules`
/// leaves out everything below it); with includes, it is reported only
/// when one matches the same way. The watched folder itself is always
/// reported.
#[derive(Debug, Clone, Default)]
pub struct WatchFilter {
    /// The patterns as given: (excludes, includes).
    patterns: (Vec<String>, Vec<String>),
    /// Compiled; `None` when the list is absent or empty.
    excludes: Option<globset::GlobSet>,
    includes: Option<globset::GlobSet>,
}

impl PartialEq for WatchFilter {
    fn eq(&self, other: &WatchFilter) -> bool {
        self.patterns == other.patterns
    }
}

impl WatchFilter {
    /// Reads both lists at the edge. Errors (answered `InvalidParams`)
    /// name the list and the pattern: not a list of strings, more than
    /// [`FILTER_PATTERNS_MAX`], one over [`FILTER_PATTERN_MAX_BYTES`], an
    /// absolute path or a `..`, or a glob that does not parse.
    pub fn parse(excludes: Option<&serde_json::Value>, includes: Option<&serde_json::Value>) -> Result<WatchFilter, String> {
        let (ex, exs) = patterns("excludes", excludes)?;
        let (inc, incs) = patterns("includes", includes)?;
        Ok(WatchFilter { patterns: (ex, inc), excludes: exs, includes: incs })
    }

    /// Whether a change at `rel` (relative to the root, `/`-separated;
    /// empty: the root itself) is reported.
    pub fn admits(&self, rel: &str) -> bool {
        if rel.is_empty() {
            return true;
        }
        let mut candidates = vec![rel];
        let mut at = rel;
        while let Some(i) = at.rfind('/') {
            at = &at[..i];
            candidates.push(at);
        }
        let hits = |set: &globset::GlobSet| candidates.iter().any(|c| set.is_match(c));
        !self.excludes.as_ref().is_some_and(hits) && self.includes.as_ref().is_none_or(hits)
    }
}

/// One list of [`WatchFilter`]: its patterns and their compiled set.
fn patterns(field: &str, value: Option<&serde_json::Value>) -> Result<(Vec<String>, Option<globset::GlobSet>), String> {
    let Some(value) = value.filter(|v| !v.is_null()) else { return Ok((Vec::new(), None)) };
    let items = value.get("items").unwrap_or(value);
    let Some(items) = items.as_array() else { return Err(format!("{field} must be {{\"items\": [patterns]}}")) };
    if items.len() > FILTER_PATTERNS_MAX {
        return Err(format!("{field} holds {} patterns, over the limit of {FILTER_PATTERNS_MAX}", items.len()));
    }
    let mut given = Vec::with_capacity(items.len());
    let mut set = globset::GlobSetBuilder::new();
    for item in items {
        let Some(p) = item.as_str() else { return Err(format!("{field}.items must be strings")) };
        if p.len() > FILTER_PATTERN_MAX_BYTES {
            return Err(format!("a pattern of {field} is over {FILTER_PATTERN_MAX_BYTES} bytes"));
        }
        let p = p.trim_start_matches("./").trim_end_matches('/');
        if p.starts_with('/') || p.split('/').any(|n| n == "..") {
            return Err(format!("{field} pattern {p:?} must be relative to the watched folder, without .."));
        }
        let glob = globset::GlobBuilder::new(p).literal_separator(true).build().map_err(|e| format!("{field} pattern {p:?}: {e}"))?;
        set.add(glob);
        given.push(p.to_owned());
    }
    if given.is_empty() {
        return Ok((given, None));
    }
    let set = set.build().map_err(|e| format!("{field}: {e}"))?;
    Ok((given, Some(set)))
}

/// One resource watch.
#[derive(Debug, Clone, PartialEq)]
pub struct Watch {
    /// Its channel, `ahp-resource-watch:/<id>`.
    pub channel: Uri,
    /// The connection that made it.
    pub conn: ConnId,
    /// Who made it (`user:<id>`; none on a host with no users directory):
    /// only the same principal may subscribe.
    pub owner: Option<String>,
    /// The real path watched.
    pub root: String,
    /// The state subscribers are answered (`root` as asked).
    pub state: ResourceWatchState,
    /// The real folders its maker could read when it was made: a change
    /// outside them is never reported.
    pub roots: Vec<String>,
    /// The sessions whose folders hold it: it ends with the last of them.
    pub sessions: BTreeSet<Uri>,
    /// Whether the shell said it is in place.
    pub live: bool,
    /// Whether anyone subscribed yet (after which it ends with its last
    /// subscriber).
    pub subscribed: bool,
    /// Its `excludes` and `includes`.
    pub filter: WatchFilter,
}

impl Watch {
    /// Whether a change at real path `path` is reported (module docs).
    pub fn admits(&self, path: &str) -> bool {
        if !is_clean(path) || !inside(path, self.roots.iter().map(String::as_str)) || !within(path, &self.root) {
            return false;
        }
        let rel = path.strip_prefix(self.root.as_str()).unwrap_or(path).trim_start_matches('/');
        (self.state.recursive || path == self.root || parent(path) == self.root) && self.filter.admits(rel)
    }
}

/// The parent of clean absolute `path` (`/a/b` → `/a`, `/a` → `/`).
fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

impl Files {
    /// Whether `owner` (on a host with, `users`, or without a users
    /// directory) may subscribe to watch channel `channel`: it exists, is
    /// in place, and was made by the same principal.
    pub(crate) fn may_subscribe(&self, users: bool, owner: Option<&str>, channel: &str) -> bool {
        self.by_channel(channel).is_some_and(|w| w.live && (!users || (owner.is_some() && w.owner.as_deref() == owner)))
    }

    /// The watch on `channel`, if any.
    fn by_channel(&self, channel: &str) -> Option<&Watch> {
        let id: u64 = channel.strip_prefix(WATCH_SCHEME)?.strip_prefix('/')?.parse().ok()?;
        self.watches.get(&id).filter(|w| w.channel == channel)
    }

    /// The snapshot of watch channel `channel` at `server_seq`, when it is
    /// in place.
    pub(crate) fn snapshot(&self, channel: &str, server_seq: u64) -> Option<Snapshot> {
        let w = self.by_channel(channel).filter(|w| w.live)?;
        Some(Snapshot { resource: channel.to_owned(), state: SnapshotState::ResourceWatch(Box::new(w.state.clone())), from_seq: server_seq as i64 })
    }
}

impl FileWork<'_> {
    /// A watch checked (its real path `root`, inside `roots`, in the
    /// folders of `sessions`): its channel allocated and the shell asked to
    /// place it; the request is answered once it is in place.
    pub(super) fn place_watch(&mut self, pending: Pending, root: String, roots: Vec<String>, sessions: BTreeSet<Uri>) {
        let FileReq::Watch { uri, recursive, excludes, includes, filter } = &pending.req else { return };
        self.state.last_watch += 1;
        let id = self.state.last_watch;
        let channel = format!("{WATCH_SCHEME}/{id}");
        let state = ResourceWatchState { root: uri.clone(), recursive: *recursive, excludes: excludes.clone(), includes: includes.clone() };
        let owner = self.shared.owner_of(pending.conn);
        let recursive = *recursive;
        let filter = filter.clone();
        self.state.watches.insert(id, Watch { channel, conn: pending.conn, owner, root: root.clone(), state, roots, sessions, live: false, subscribed: false, filter });
        crate::mark!("files_watch_placed");
        self.send(Pending { step: Step::Placing { watch: id }, ..pending }, FsCmd::Watch { watch: id, path: root, recursive });
    }

    /// The shell answered a watch's placing: in place, the request is
    /// answered with its channel; refused, it is gone and the request is
    /// answered with why. A watch ended meanwhile is taken down again.
    pub(super) fn placed(&mut self, conn: ConnId, id: u64, watch: u64, result: FsResult) {
        let Some(w) = self.state.watches.get_mut(&watch) else {
            // Ended while it was being placed (its connection went): the
            // shell placed it for nobody.
            if result == FsResult::Done {
                self.send_unanswered(FsCmd::Unwatch { watch });
            }
            return;
        };
        match result {
            FsResult::Done => {
                w.live = true;
                let channel = w.channel.clone();
                self.reply(conn, id, serde_json::to_value(CreateResourceWatchResult { channel }).unwrap_or_default());
            }
            FsResult::Failed(e) => {
                self.state.watches.remove(&watch);
                self.refuse(conn, id, super::requests::fs_error(&e, super::reach::Access::Read));
            }
            _ => {
                self.state.watches.remove(&watch);
                self.refuse(conn, id, error(crate::protocol::error::INTERNAL_ERROR, "the host's filesystem answered out of turn"));
            }
        }
    }

    /// `subscribe` to watch channel `channel` by `conn` (request `id`; the
    /// grant and the subscription limit checked by the host): its state,
    /// then its changes. One that does not exist, or another principal's,
    /// is not found (the same words).
    pub(crate) fn on_subscribe(&mut self, conn: ConnId, id: u64, channel: &Uri) -> Vec<FilesOut> {
        let users = self.shared.config.users.is_some();
        let owner = self.shared.owner_of(conn);
        if !self.state.may_subscribe(users, owner.as_deref(), channel) {
            crate::mark!("files_watch_subscribe_refused");
            self.refuse(conn, id, error(NOT_FOUND, format!("no resource watch {}", crate::ids::printable(channel))));
            return std::mem::take(&mut self.outs);
        }
        let snapshot = self.state.snapshot(channel, self.shared.server_seq);
        if let Some(w) = self.state.watches.values_mut().find(|w| w.channel == *channel) {
            w.subscribed = true;
        }
        if let Some(c) = self.shared.conns.get_mut(&conn) {
            c.subscriptions.insert(channel.clone());
        }
        self.reply(conn, id, serde_json::to_value(SubscribeResult { snapshot }).unwrap_or_default());
        std::mem::take(&mut self.outs)
    }

    /// A subscription to `channel` ended (`unsubscribe`): a watch nobody
    /// is subscribed to any more ends.
    pub(crate) fn on_unsubscribed(&mut self, channel: &str) -> Vec<FilesOut> {
        if let Some(w) = self.state.by_channel(channel) {
            let id = self.state.watches.iter().find(|(_, x)| x.channel == w.channel).map(|(id, _)| *id);
            let anyone = self.shared.conns.values().any(|c| c.subscriptions.contains(channel));
            if let (Some(id), false) = (id, anyone) {
                crate::mark!("files_watch_ended_unsubscribed");
                self.end(id, "its last subscriber unsubscribed");
            }
        }
        std::mem::take(&mut self.outs)
    }

    /// Connection `conn` went (already out of the connections): the
    /// watches nobody is subscribed to any more end, and those it made
    /// that nobody ever subscribed to.
    pub(crate) fn on_disconnected(&mut self, conn: ConnId) -> Vec<FilesOut> {
        let ending: Vec<u64> = self
            .state
            .watches
            .iter()
            .filter(|(_, w)| (w.subscribed || w.conn == conn) && !self.shared.conns.values().any(|c| c.subscriptions.contains(&w.channel)))
            .map(|(id, _)| *id)
            .collect();
        for id in ending {
            crate::mark!("files_watch_ended_disconnected");
            self.end(id, "its last subscriber went");
        }
        std::mem::take(&mut self.outs)
    }

    /// Session `session` was disposed: the watches in its folders that no
    /// other session's folders hold end.
    pub(crate) fn follow_dispose(&mut self, session: &Uri) -> Vec<FilesOut> {
        let mut ending = Vec::new();
        for (id, w) in self.state.watches.iter_mut() {
            if w.sessions.remove(session) && w.sessions.is_empty() {
                ending.push(*id);
            }
        }
        for id in ending {
            crate::mark!("files_watch_ended_disposed");
            self.end(id, "the session whose folder it watched was disposed");
        }
        std::mem::take(&mut self.outs)
    }

    /// Ends watch `id`: the shell stops it, its subscribers are dropped
    /// (its channel retired, so a `reconnect` is answered with what is
    /// there now, not a replay), and a line says why.
    fn end(&mut self, id: u64, why: &str) {
        let Some(w) = self.state.watches.remove(&id) else { return };
        if w.live {
            self.send_unanswered(FsCmd::Unwatch { watch: id });
        }
        for c in self.shared.conns.values_mut() {
            c.subscriptions.remove(&w.channel);
        }
        self.shared.retired.insert(w.channel.clone());
        self.shared.log(LogLevel::Info, "files.watch_ended", None, format!("{}: {why}", w.channel));
    }

    /// A batch from the shell for watch `watch` (`Input::FsChanged`):
    /// the admitted changes, each path once with its last change in the
    /// order first seen, fanned out to the channel's subscribers in
    /// actions of at most `watch_batch_max`. Nothing goes out for an
    /// unknown watch or a batch with nothing admitted.
    pub(crate) fn on_changed(&mut self, watch: u64, changes: Vec<(String, ResourceChangeType)>) -> Vec<FilesOut> {
        let Some(w) = self.state.watches.get(&watch).filter(|w| w.live) else {
            crate::mark!("files_watch_change_stale");
            return std::mem::take(&mut self.outs);
        };
        let mut order: Vec<String> = Vec::new();
        let mut last: BTreeMap<String, ResourceChangeType> = BTreeMap::new();
        for (path, change) in changes {
            if !w.admits(&path) {
                crate::mark!("files_watch_change_outside_dropped");
                continue;
            }
            if last.insert(path.clone(), change).is_none() {
                order.push(path);
            }
        }
        if order.is_empty() {
            return std::mem::take(&mut self.outs);
        }
        let channel = w.channel.clone();
        let max = self.shared.config.files.watch_batch_max.max(1);
        for chunk in order.chunks(max) {
            let items: Vec<ResourceChange> = chunk
                .iter()
                .filter_map(|p| last.get(p).map(|t| ResourceChange { uri: crate::git::uri_of_path(p), r#type: *t }))
                .collect();
            let action = StateAction::ResourceWatchChanged(ResourceWatchChangedAction { changes: serde_json::json!({ "items": items }) });
            crate::mark!("files_watch_changes_sent");
            self.shared.fan_out(&channel, action, None);
        }
        std::mem::take(&mut self.outs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn excludes_and_includes_apply_to_a_path_and_the_folders_above_it() {
        let f = WatchFilter::parse(Some(&json!({"items": ["node_modules", "**/*.log"]})), None).unwrap_or_default();
        assert!(f.admits("src/main.rs"));
        assert!(!f.admits("node_modules"));
        assert!(!f.admits("node_modules/a/b.js"), "below an excluded folder");
        assert!(!f.admits("build/out.log") && !f.admits("x.log"));
        assert!(f.admits(""), "the root itself");
        let f = WatchFilter::parse(None, Some(&json!({"items": ["src", "*.md"]}))).unwrap_or_default();
        assert!(f.admits("src/a/b.rs") && f.admits("README.md"));
        assert!(!f.admits("docs/x.md"), "* stays within one name");
        assert!(!f.admits("target/debug/x"));
        let f = WatchFilter::parse(Some(&json!(["src/gen/**"])), Some(&json!({"items": ["src"]}))).unwrap_or_default();
        assert!(f.admits("src/lib.rs") && !f.admits("src/gen/x.rs"), "excludes win");
        assert_eq!(WatchFilter::parse(Some(&json!({"items": []})), Some(&serde_json::Value::Null)), Ok(WatchFilter::default()));
        for bad in [json!({"items": "x"}), json!({"items": [1]}), json!({"items": ["/etc"]}), json!({"items": ["a/../b"]}), json!({"items": ["a[" ]})] {
            assert!(WatchFilter::parse(Some(&bad), None).is_err(), "{bad}");
        }
        assert!(WatchFilter::parse(None, Some(&json!({"items": vec!["a"; FILTER_PATTERNS_MAX + 1]}))).is_err());
    }
}
