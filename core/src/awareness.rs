//! Workspace awareness: the rules by which live sessions see each other
//! and are warned before they collide (spec 004, "Coordinate concurrent
//! sessions"; issue 10).
//!
//! Every live session publishes one [`ActiveRecord`] in a registry
//! directory shared by every process of the machine (the shell's
//! `exec/registry`). This module owns, as pure functions:
//! - the record's shape (JSON, camelCase, [`RECORD_VERSION`]);
//! - sanitising records read back ([`parse_record`]): they are untrusted
//!   input, so terminal and bidirectional control characters are stripped,
//!   text and path lists are capped, and malformed or future-dated records
//!   are refused one by one without breaking the scan;
//! - the staleness judgement ([`judge`]): a record whose writer is gone, or
//!   whose pid now belongs to a process with another start time, is stale;
//! - peers ([`peers_of`]): the other live records of the same workspace
//!   (same repository root, or overlapping working directories);
//! - warnings ([`warnings`]): two sessions on one Git index or branch, path
//!   overlap between claims, HEAD moved under the session;
//! - the event diff ([`diff`]) between two peer sets: joined, updated (only
//!   on status, activity or claim changes; heartbeat noise is ignored), left;
//! - the tier ([`Tier`]) from the session config key `sessionAwareness`.
//!
//! Paths here are absolute POSIX paths, compared lexically after
//! normalisation ([`normalize_path`]); nothing here touches the file system.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::git::normalize_path;

/// The session state's `_meta` key that carries the awareness events a
/// `session/metaChanged` brings (`docs/AWARENESS.md`): each event rides on
/// one change only, so any other change of `_meta` sets it empty (`{}`).
pub const EVENTS_META_KEY: &str = "ahpd.awarenessEvents";

/// Layout version of [`ActiveRecord`] written by this build. Records of
/// another version are skipped.
pub const RECORD_VERSION: u32 = 1;
/// Largest record file read, in bytes; a bigger one is refused.
pub const RECORD_MAX_BYTES: usize = 64 * 1024;
/// Longest activity line kept, in characters.
pub const ACTIVITY_MAX_CHARS: usize = 160;
/// Longest single path, session URI, host or branch name kept, in
/// characters; a longer path is dropped, a longer name clipped.
pub const TEXT_MAX_CHARS: usize = 1024;
/// Most claims kept per record, in paths.
pub const CLAIMS_MAX: usize = 64;
/// Most working directories kept per record.
pub const WORKING_DIRECTORIES_MAX: usize = 8;
/// How far in the future a record's `updatedAt` may lie before it is
/// refused as future-dated, in ms (clock skew between writers).
pub const FUTURE_TOLERANCE_MS: i64 = 60_000;
/// A record not refreshed for this long is stale whatever its pid says, in
/// ms (a hung writer, or a writer on another machine whose pid cannot be
/// checked).
pub const EXPIRE_AFTER_MS: i64 = 10 * 60_000;
/// The session config key that chooses the tier.
pub const TIER_KEY: &str = "sessionAwareness";
/// The session config key that makes conflicting writes proceed with a
/// warning instead of waiting for approval (an auto-approve mode).
pub const AUTO_APPROVE_KEY: &str = "autoApprove";
/// The session config keys awareness owns (the host's, not a backend's):
/// a session keeps them for its whole life, across restarts too.
pub const HOST_KEYS: [&str; 2] = [TIER_KEY, AUTO_APPROVE_KEY];

/// Whether `key` is one of the session config keys awareness owns
/// ([`HOST_KEYS`]).
pub fn is_host_key(key: &str) -> bool {
    HOST_KEYS.contains(&key)
}

/// The `_meta` key of a `chat/toolCallReady` by which a backend declares the
/// absolute paths the tool call will write (a list of strings). A backend
/// that declares writes on a call it marks `confirmed` waits for the host's
/// `ConfirmTool` before writing.
pub const WRITES_META_KEY: &str = "ahpd.writes";

/// How much a session takes part in coordination (spec 004 table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// Publishes activity and reports peers; no warnings.
    Passive,
    /// Passive, plus advisory warnings (the default).
    #[default]
    Warn,
    /// Warn, plus: a write to a path another live session claims goes
    /// through the normal permission flow.
    Coordinate,
}

impl Tier {
    /// The tier a session's config names under [`TIER_KEY`]; anything
    /// missing or unknown is the default, `warn`.
    pub fn of_config(config: &serde_json::Map<String, serde_json::Value>) -> Tier {
        match config.get(TIER_KEY).and_then(|v| v.as_str()) {
            Some("passive") => Tier::Passive,
            Some("coordinate") => Tier::Coordinate,
            _ => Tier::Warn,
        }
    }

    /// The wire name.
    pub fn name(self) -> &'static str {
        match self {
            Tier::Passive => "passive",
            Tier::Warn => "warn",
            Tier::Coordinate => "coordinate",
        }
    }
}

/// Whether a session's config turns on an auto-approve mode
/// ([`AUTO_APPROVE_KEY`] `true`).
pub fn auto_approve(config: &serde_json::Map<String, serde_json::Value>) -> bool {
    config.get(AUTO_APPROVE_KEY).and_then(|v| v.as_bool()).unwrap_or(false)
}

/// One live session's entry in the registry: one JSON file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActiveRecord {
    /// Layout version ([`RECORD_VERSION`]).
    pub version: u32,
    /// The session's URI.
    pub session: String,
    /// The writing host's name.
    pub host: String,
    /// The writing process's id.
    pub pid: u32,
    /// The writing process's start time as the OS reports it (Linux:
    /// clock ticks after boot, `/proc/<pid>/stat` field 22; 0 where
    /// unknown). With `pid` it names the process even across pid reuse.
    pub pid_start: u64,
    /// The session's working directories, absolute paths.
    #[serde(default)]
    pub working_directories: Vec<String>,
    /// The Git working tree's root the first working directory is in, if
    /// any (absolute path).
    #[serde(default)]
    pub repository: Option<String>,
    /// The checked-out branch's short name, if on a branch.
    #[serde(default)]
    pub branch: Option<String>,
    /// The commit HEAD names (hex), if any.
    #[serde(default)]
    pub head: Option<String>,
    /// The session's status bits (AHP `SessionStatus`).
    #[serde(default)]
    pub status: u32,
    /// One line on what the session is doing, possibly empty.
    #[serde(default)]
    pub activity: String,
    /// Absolute paths the session's agent wrote (its claims), sorted.
    #[serde(default)]
    pub claims: Vec<String>,
    /// When the writer last refreshed the record, ms since the epoch.
    pub updated_at: i64,
}

impl ActiveRecord {
    /// The key naming the peer in peer sets and events:
    /// `<session>#<pid>@<host>`.
    pub fn key(&self) -> String {
        format!("{}#{}@{}", self.session, self.pid, self.host)
    }

    /// Whether `other` differs from `self` in more than the heartbeat
    /// timestamp (any field): a reason to publish again.
    pub fn differs_beyond_heartbeat(&self, other: &ActiveRecord) -> bool {
        // Field by field, so that a new field cannot be forgotten here
        // (the destructuring stops compiling) and nothing is cloned (the
        // tick asks this of every live session).
        let ActiveRecord { version, session, host, pid, pid_start, working_directories, repository, branch, head, status, activity, claims, updated_at: _ } = self;
        *version != other.version
            || *session != other.session
            || *host != other.host
            || *pid != other.pid
            || *pid_start != other.pid_start
            || *working_directories != other.working_directories
            || *repository != other.repository
            || *branch != other.branch
            || *head != other.head
            || *status != other.status
            || *activity != other.activity
            || *claims != other.claims
    }
}

/// Why a record file was skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Larger than [`RECORD_MAX_BYTES`].
    TooLarge,
    /// Not a record: bad JSON (e.g. a half-written `{"pid":`) or a missing
    /// field; the parser's words.
    Malformed(String),
    /// Another layout version.
    Version(u32),
    /// `updatedAt` lies further in the future than [`FUTURE_TOLERANCE_MS`].
    FutureDated,
    /// A field is unusable (no session, pid 0).
    BadField(&'static str),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::TooLarge => write!(f, "larger than {RECORD_MAX_BYTES} bytes"),
            Refusal::Malformed(e) => write!(f, "malformed: {e}"),
            Refusal::Version(v) => write!(f, "unknown record version {v}"),
            Refusal::FutureDated => write!(f, "dated in the future"),
            Refusal::BadField(name) => write!(f, "unusable field {name}"),
        }
    }
}

/// Whether `c` is a terminal control character (C0, DEL, C1) or a
/// bidirectional formatting character (U+061C, U+200E/F, U+202A–E,
/// U+2066–9), which could rewrite what a person sees on a terminal.
pub fn is_hostile_char(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// `text` without hostile characters ([`is_hostile_char`]), clipped to
/// `max` characters.
pub fn clean_text(text: &str, max: usize) -> String {
    if is_clean(text, max) {
        return text.to_owned();
    }
    text.chars().filter(|c| !is_hostile_char(*c)).take(max).collect()
}

/// Whether [`clean_text`] would leave `text` as it is: no hostile
/// character, at most `max` characters (the common case, checked without
/// building a new string).
fn is_clean(text: &str, max: usize) -> bool {
    let mut n = 0usize;
    text.chars().all(|c| {
        n += 1;
        n <= max && !is_hostile_char(c)
    })
}

/// [`clean_text`] of an owned string, kept as it is when already clean.
fn clean_owned(text: String, max: usize) -> String {
    if is_clean(&text, max) {
        text
    } else {
        clean_text(&text, max)
    }
}

/// The pid a record file names, read leniently (for the shell to observe
/// that process before the record is judged); `None` when there is none.
pub fn peek_pid(bytes: &[u8]) -> Option<u32> {
    if bytes.len() > RECORD_MAX_BYTES {
        return None;
    }
    let value: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    value.get("pid")?.as_u64().and_then(|p| u32::try_from(p).ok())
}

/// Parses and sanitises one record file read at wall time `now_ms`.
///
/// Errors: [`Refusal`] when the file is too large, malformed, of another
/// version, future-dated, or names no session or pid 0. Sanitising drops
/// hostile characters everywhere, clips the activity to
/// [`ACTIVITY_MAX_CHARS`] and names to [`TEXT_MAX_CHARS`], keeps at most
/// [`CLAIMS_MAX`] claims and [`WORKING_DIRECTORIES_MAX`] directories, and
/// drops paths that are not absolute or too long.
pub fn parse_record(bytes: &[u8], now_ms: i64) -> Result<ActiveRecord, Refusal> {
    if bytes.len() > RECORD_MAX_BYTES {
        return Err(Refusal::TooLarge);
    }
    let raw: ActiveRecord = serde_json::from_slice(bytes).map_err(|e| Refusal::Malformed(e.to_string()))?;
    if raw.version != RECORD_VERSION {
        return Err(Refusal::Version(raw.version));
    }
    if raw.updated_at > now_ms.saturating_add(FUTURE_TOLERANCE_MS) {
        return Err(Refusal::FutureDated);
    }
    if raw.pid == 0 {
        return Err(Refusal::BadField("pid"));
    }
    let session = clean_owned(raw.session, TEXT_MAX_CHARS);
    if session.is_empty() {
        return Err(Refusal::BadField("session"));
    }
    let clean_path = |p: &String| -> Option<String> {
        if p.chars().count() > TEXT_MAX_CHARS {
            return None;
        }
        if is_clean(p, TEXT_MAX_CHARS) {
            return normalize_path(p);
        }
        normalize_path(&clean_text(p, TEXT_MAX_CHARS))
    };
    let clean_name = |s: Option<String>| s.map(|s| clean_owned(s, TEXT_MAX_CHARS)).filter(|s| !s.is_empty());
    let mut claims: Vec<String> = raw.claims.iter().take(CLAIMS_MAX).filter_map(clean_path).collect();
    claims.sort();
    claims.dedup();
    Ok(ActiveRecord {
        version: raw.version,
        session,
        host: clean_owned(raw.host, TEXT_MAX_CHARS),
        pid: raw.pid,
        pid_start: raw.pid_start,
        working_directories: raw.working_directories.iter().take(WORKING_DIRECTORIES_MAX).filter_map(clean_path).collect(),
        repository: raw.repository.as_ref().and_then(clean_path),
        branch: clean_name(raw.branch),
        head: clean_name(raw.head),
        status: raw.status,
        activity: clean_owned(raw.activity, ACTIVITY_MAX_CHARS),
        claims,
        updated_at: raw.updated_at,
    })
}

/// What [`parse_record`] answers at wall time `now_ms` for the bytes it
/// parsed as `record` at some earlier time: of its checks only the
/// future-date one depends on the time, so a scan that finds a file
/// unchanged need not parse it again.
///
/// Errors: [`Refusal::FutureDated`] as in [`parse_record`].
pub fn parse_record_again(record: &ActiveRecord, now_ms: i64) -> Result<ActiveRecord, Refusal> {
    if record.updated_at > now_ms.saturating_add(FUTURE_TOLERANCE_MS) {
        return Err(Refusal::FutureDated);
    }
    Ok(record.clone())
}

/// What the shell saw of a process when it read a record naming it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ProcessObservation {
    /// The pid looked at.
    pub pid: u32,
    /// Whether a process with that pid exists.
    pub alive: bool,
    /// Its start time in the OS's units (see [`ActiveRecord::pid_start`]),
    /// `None` when it could not be read.
    pub start: Option<u64>,
}

/// Whether a record's writer is still there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// The writer runs: the record stands.
    Live,
    /// The record is left over; the reason, for the log.
    Stale(&'static str),
}

/// Judges one sanitised record read at wall time `now_ms` by a host named
/// `this_host`, given what the shell observed of the pid it names
/// (`None`: not observed). A record is stale when it was not refreshed for
/// [`EXPIRE_AFTER_MS`]; and, for a writer on this host, when its process is
/// gone or its pid now belongs to a process with another start time. A
/// writer on another host is judged by age alone.
pub fn judge(record: &ActiveRecord, this_host: &str, observed: Option<&ProcessObservation>, now_ms: i64) -> Liveness {
    if now_ms.saturating_sub(record.updated_at) > EXPIRE_AFTER_MS {
        return Liveness::Stale("not refreshed for too long");
    }
    if record.host != this_host {
        return Liveness::Live;
    }
    match observed {
        None => Liveness::Stale("its process was not observed"),
        Some(o) if o.pid != record.pid => Liveness::Stale("its process was not observed"),
        Some(o) if !o.alive => Liveness::Stale("its process is gone"),
        Some(o) if o.start.unwrap_or(0) != record.pid_start => Liveness::Stale("its pid belongs to another process now"),
        Some(_) => Liveness::Live,
    }
}

/// `rel` resolved against the absolute directory `base` (an absolute `rel`
/// stands alone), normalised; `None` when neither gives an absolute path.
pub fn join(base: Option<&str>, rel: &str) -> Option<String> {
    if rel.starts_with('/') {
        return normalize_path(rel);
    }
    normalize_path(&format!("{}/{rel}", base?))
}

/// The absolute path a working-directory URI names (`file:///a/b` or a bare
/// absolute path), with `%XX` escapes decoded; `None` for anything else.
pub fn uri_to_path(uri: &str) -> Option<String> {
    if uri.starts_with('/') {
        return normalize_path(uri);
    }
    normalize_path(&crate::git::path_of_uri(uri)?)
}

/// Whether `path` is `ancestor` or inside it (path-component-wise).
pub fn contains(ancestor: &str, path: &str) -> bool {
    path == ancestor || ancestor == "/" || path.strip_prefix(ancestor).is_some_and(|rest| rest.starts_with('/'))
}

/// Whether two paths overlap: one is the other or inside it.
pub fn overlaps(a: &str, b: &str) -> bool {
    contains(a, b) || contains(b, a)
}

/// Whether two records are in one workspace: the same repository root, or
/// overlapping working directories.
pub fn same_workspace(a: &ActiveRecord, b: &ActiveRecord) -> bool {
    if a.repository.is_some() && a.repository == b.repository {
        return true;
    }
    a.working_directories.iter().any(|x| b.working_directories.iter().any(|y| overlaps(x, y)))
}

/// A set of peer records keyed by [`ActiveRecord::key`]. Keys and records
/// are shared (`Arc`): the host keeps one copy of each live record and
/// every session's peer set points at it (issue 21: memory linear in the
/// live records, not in sessions × peers).
pub type Peers = BTreeMap<Arc<str>, Arc<ActiveRecord>>;

/// A session's peers (spec 004): the live records of its workspace, less
/// its own. The workspace's records are one map that every session seeing
/// the same records shares ([`PeerSet::share`]), its own key left out when
/// read: a folder of N live sessions keeps one map of N, not N maps of N-1
/// (issue 21: "a peer list per folder shared").
#[derive(Debug, Clone, Default)]
pub struct PeerSet {
    /// The live records of the workspace, the session's own among them
    /// when it is live.
    workspace: Arc<Peers>,
    /// The session's own key in `workspace`, if there.
    own: Option<Arc<str>>,
}

impl PeerSet {
    /// The peers, in key order: `(key, record)`.
    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &Arc<ActiveRecord>)> + '_ {
        self.workspace.iter().filter(move |(k, _)| self.own.as_deref() != Some(&***k))
    }

    /// The peers' keys, in order.
    pub fn keys(&self) -> impl Iterator<Item = &Arc<str>> + '_ {
        self.iter().map(|(k, _)| k)
    }

    /// The peers' records, in key order.
    pub fn values(&self) -> impl Iterator<Item = &Arc<ActiveRecord>> + '_ {
        self.iter().map(|(_, r)| r)
    }

    /// How many peers.
    pub fn len(&self) -> usize {
        self.workspace.len() - usize::from(self.own.is_some())
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The peer with key `key` (never the session's own record).
    pub fn get(&self, key: &str) -> Option<&Arc<ActiveRecord>> {
        if self.own.as_deref() == Some(key) {
            return None;
        }
        self.workspace.get(key)
    }

    /// Whether `key` is a peer.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The keys of the workspace's live records, the session's own among
    /// them: what sessions that may share one map have in common.
    pub fn workspace_keys(&self) -> Vec<Arc<str>> {
        self.workspace.keys().cloned().collect()
    }

    /// Takes `other`'s workspace map when it holds the same records (the
    /// same shared copies, key for key), so both point at one map. Returns
    /// whether they now share it.
    pub fn share(&mut self, other: &PeerSet) -> bool {
        if Arc::ptr_eq(&self.workspace, &other.workspace) {
            return true;
        }
        let same = self.workspace.len() == other.workspace.len()
            && self.workspace.iter().zip(other.workspace.iter()).all(|((k, r), (ok, or))| k == ok && Arc::ptr_eq(r, or));
        if same {
            self.workspace = Arc::clone(&other.workspace);
        }
        same
    }
}

/// A session's peers: the records of `live` in `me`'s workspace, except
/// `me`'s own (same session, pid and host: its key).
pub fn peers_of(me: &ActiveRecord, live: &Peers) -> PeerSet {
    let own_key = me.key();
    let mut own = None;
    let workspace: Peers = live
        .iter()
        .filter(|(k, r)| {
            let mine = ***k == *own_key;
            if mine {
                own = Some(Arc::clone(k));
            }
            mine || same_workspace(me, r)
        })
        .map(|(k, r)| (Arc::clone(k), Arc::clone(r)))
        .collect();
    PeerSet { workspace: Arc::new(workspace), own }
}

/// The claims of `peers` that `paths` would touch: `(peer session, path of
/// `paths`)` pairs, in peer-key then path order.
pub fn claimed_by_peers(paths: &[String], peers: &PeerSet) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for peer in peers.values() {
        for path in paths {
            if peer.claims.iter().any(|c| overlaps(c, path)) {
                out.push((peer.session.clone(), path.clone()));
            }
        }
    }
    out
}

/// How the host answers a `chat/toolCallReady` that declares the paths it
/// will write (`_meta["ahpd.writes"]`, [`WRITES_META_KEY`]) and waits for the
/// host's word (`confirmed` set) ([`vet_declared_write`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteVet {
    /// Not the host's to confirm: nothing declared, or it does not wait.
    NotAsked,
    /// No live peer claims a declared path: confirmed at once.
    Clear,
    /// A peer claims one and the `coordinate` tier holds it for a person:
    /// rewritten to wait for confirmation. The conflicts, in words.
    Held(String),
    /// A peer claims one; the `coordinate` tier's auto-approve confirms it.
    AutoApproved(String),
    /// A peer claims one; the `warn` or `passive` tier confirms it with a
    /// warning.
    Warned(String),
}

impl WriteVet {
    /// Whether the host confirms the tool call now.
    pub fn confirms(&self) -> bool {
        matches!(self, WriteVet::Clear | WriteVet::AutoApproved(_) | WriteVet::Warned(_))
    }
}

/// Vets a `chat/toolCallReady` of a session whose config is `config`, first
/// working directory `base`, against its live `peers` (with awareness
/// `enabled`; spec 004, the `coordinate` tier's hold on conflicting
/// writes). A conflict is written on the action's `_meta`
/// (`ahpd.awarenessWarning`); a hold rewrites it to wait for a person.
pub fn vet_declared_write(
    enabled: bool,
    peers: Option<&PeerSet>,
    config: &serde_json::Map<String, serde_json::Value>,
    base: Option<&str>,
    action: &mut ahp_types::actions::ChatToolCallReadyAction,
) -> WriteVet {
    use serde_json::Value;
    let declared: Vec<String> = match action.meta.as_ref().and_then(|m| m.get(WRITES_META_KEY)) {
        Some(Value::Array(items)) => items.iter().filter_map(|v| v.as_str()).map(str::to_owned).collect(),
        _ => return WriteVet::NotAsked,
    };
    if action.confirmed.is_none() {
        return WriteVet::NotAsked;
    }
    let tier = Tier::of_config(config);
    let base = base.and_then(uri_to_path);
    let paths: Vec<String> = declared.iter().take(CLAIMS_MAX).filter_map(|p| join(base.as_deref(), p)).collect();
    let conflicts = match peers {
        Some(peers) if enabled && tier != Tier::Passive => claimed_by_peers(&paths, peers),
        _ => Vec::new(),
    };
    if conflicts.is_empty() {
        return WriteVet::Clear;
    }
    let words: Vec<String> = conflicts.iter().map(|(peer, path)| format!("{path} is claimed by {peer}")).collect();
    let message = words.join("; ");
    if let Some(meta) = action.meta.as_mut() {
        meta.insert("ahpd.awarenessWarning".to_owned(), Value::String(message.clone()));
    }
    match tier {
        Tier::Coordinate if !auto_approve(config) => {
            action.confirmed = None;
            action.confirmation_title = Some(ahp_types::common::StringOrMarkdown::Plain(format!("Write anyway? {message}")));
            WriteVet::Held(message)
        }
        Tier::Coordinate => {
            action.confirmed = Some(ahp_types::state::ToolCallConfirmationReason::Setting);
            WriteVet::AutoApproved(message)
        }
        Tier::Warn | Tier::Passive => WriteVet::Warned(message),
    }
}

/// What a warning is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum WarningKind {
    /// Two sessions in one Git working tree: they share its index.
    SharedIndex,
    /// Two sessions on the same branch name in different working trees.
    SameBranch,
    /// Both sessions claim a path.
    PathOverlap,
    /// HEAD moved under the session since it went live.
    RepositoryDrift,
}

/// One advisory warning (spec 004, `warn` tier).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Warning {
    /// What it is about.
    pub kind: WarningKind,
    /// The peer session it involves, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    /// The paths involved (claims overlapping), if any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// One line for a person.
    pub message: String,
}

/// The warnings for `me` among `peers`, given the HEAD it had when it went
/// live (`baseline_head`). Sorted; empty for the `passive` tier.
pub fn warnings(tier: Tier, me: &ActiveRecord, baseline_head: Option<&str>, peers: &PeerSet) -> Vec<Warning> {
    if tier == Tier::Passive {
        return Vec::new();
    }
    let mut out = Vec::new();
    for peer in peers.values() {
        if me.repository.is_some() && me.repository == peer.repository {
            out.push(Warning {
                kind: WarningKind::SharedIndex,
                peer: Some(peer.session.clone()),
                paths: Vec::new(),
                message: format!(
                    "{} also works in the Git working tree {}: commits and staging share one index",
                    peer.session,
                    me.repository.as_deref().unwrap_or_default()
                ),
            });
        } else if me.branch.is_some() && me.branch == peer.branch {
            out.push(Warning {
                kind: WarningKind::SameBranch,
                peer: Some(peer.session.clone()),
                paths: Vec::new(),
                message: format!("{} is on the same branch {}", peer.session, me.branch.as_deref().unwrap_or_default()),
            });
        }
        let mut paths: Vec<String> = me.claims.iter().filter(|c| peer.claims.iter().any(|p| overlaps(c, p))).cloned().collect();
        paths.dedup();
        if !paths.is_empty() {
            out.push(Warning {
                kind: WarningKind::PathOverlap,
                peer: Some(peer.session.clone()),
                message: format!("{} also writes {}", peer.session, paths.join(", ")),
                paths,
            });
        }
    }
    if let (Some(base), Some(head)) = (baseline_head, me.head.as_deref()) {
        if base != head {
            out.push(Warning {
                kind: WarningKind::RepositoryDrift,
                peer: None,
                paths: Vec::new(),
                message: format!("HEAD moved under the session: {} → {}", short(base), short(head)),
            });
        }
    }
    out.sort();
    out.dedup();
    out
}

/// A session's warnings of one kind, as its `_meta` shows them
/// (`ahpd.awarenessWarnings`): how many, and one line for a person. The
/// warnings one by one (which peer, which paths) are answered by
/// `ahpd/listPeers`: in a shared Git working tree every session warns of
/// every other, and a list per peer on every session's `_meta` would grow
/// with sessions × peers (issue 21).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WarningSummary {
    /// What the warnings are about.
    pub kind: WarningKind,
    /// How many warnings of this kind the session has.
    pub count: usize,
    /// The first one's message, with how many more there are.
    pub message: String,
}

/// `warnings` (sorted, as [`warnings`] gives them) one summary per kind,
/// in kind order.
pub fn summarize(warnings: &[Warning]) -> Vec<WarningSummary> {
    let mut out: Vec<WarningSummary> = Vec::new();
    for w in warnings {
        match out.last_mut() {
            Some(last) if last.kind == w.kind => last.count += 1,
            _ => out.push(WarningSummary { kind: w.kind, count: 1, message: w.message.clone() }),
        }
    }
    for s in &mut out {
        if s.count > 1 {
            s.message = format!("{} (and {} more)", s.message, s.count - 1);
        }
    }
    out
}

fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

/// A change in a session's peer set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PeerEventKind {
    /// `session_peer_joined`: another session appears.
    #[serde(rename = "session_peer_joined")]
    Joined,
    /// `session_peer_updated`: its status, activity or claims changed.
    #[serde(rename = "session_peer_updated")]
    Updated,
    /// `session_peer_left`: a previously visible session disappeared.
    #[serde(rename = "session_peer_left")]
    Left,
}

impl PeerEventKind {
    /// The event's name.
    pub fn name(self) -> &'static str {
        match self {
            PeerEventKind::Joined => "session_peer_joined",
            PeerEventKind::Updated => "session_peer_updated",
            PeerEventKind::Left => "session_peer_left",
        }
    }
}

/// Whether a peer changed in a way worth an event: status, activity or
/// claims (spec 004: "heartbeat timestamp noise is ignored").
pub fn meaningful_change(old: &ActiveRecord, new: &ActiveRecord) -> bool {
    old.status != new.status || old.activity != new.activity || old.claims != new.claims
}

/// The events between two peer sets, in key order: `(kind, peer key)`.
pub fn diff(old: &PeerSet, new: &PeerSet) -> Vec<(PeerEventKind, Arc<str>)> {
    let mut out = Vec::new();
    if Arc::ptr_eq(&old.workspace, &new.workspace) && old.own == new.own {
        return out;
    }
    for (key, record) in new.iter() {
        match old.get(key) {
            None => out.push((PeerEventKind::Joined, Arc::clone(key))),
            // The same shared record: nothing changed (most peers, most scans).
            Some(before) if Arc::ptr_eq(before, record) => {}
            Some(before) if meaningful_change(before, record) => out.push((PeerEventKind::Updated, Arc::clone(key))),
            Some(_) => {}
        }
    }
    for key in old.keys().filter(|k| !new.contains_key(k)) {
        out.push((PeerEventKind::Left, Arc::clone(key)));
    }
    out
}

/// What the shell found of one working directory's Git repository.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RepoObservation {
    /// The working tree's root (absolute path).
    pub root: String,
    /// The branch HEAD is on, if any.
    pub branch: Option<String>,
    /// The commit HEAD names (hex), if any.
    pub head: Option<String>,
}

/// One file the shell read from the registry directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryFile {
    /// The file's name in the registry directory.
    pub name: String,
    /// Its bytes as read (at most [`RECORD_MAX_BYTES`] + 1).
    pub bytes: Vec<u8>,
    /// What the shell saw of the pid the file names ([`peek_pid`]), if it
    /// names one.
    pub process: Option<ProcessObservation>,
}

/// Settings of awareness for the whole host (`Config::awareness`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AwarenessConfig {
    /// Whether this host publishes and scans at all (off: no registry
    /// effects; the simulator and tests that do not care leave it off).
    pub enabled: bool,
    /// This process's id, written into every record.
    pub pid: u32,
    /// This process's start time ([`ActiveRecord::pid_start`]).
    pub pid_start: u64,
    /// Period of the heartbeat (republish every live session, rescan), ms.
    pub heartbeat_ms: u64,
    /// The least time between the starts of two registry scans, ms: the
    /// publishes of many turns' status changes share one scan and one
    /// round of peer updates instead of one each (issue 21: awareness
    /// linear in peers, changes debounced). 0: a scan whenever one is asked.
    pub scan_gap_ms: u64,
}

impl Default for AwarenessConfig {
    fn default() -> AwarenessConfig {
        AwarenessConfig { enabled: false, pid: 0, pid_start: 0, heartbeat_ms: 5_000, scan_gap_ms: 250 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(session: &str, pid: u32, dirs: &[&str], claims: &[&str]) -> ActiveRecord {
        ActiveRecord {
            version: RECORD_VERSION,
            session: session.to_owned(),
            host: "h".to_owned(),
            pid,
            pid_start: 77,
            working_directories: dirs.iter().map(|s| s.to_string()).collect(),
            repository: None,
            branch: None,
            head: None,
            status: crate::record::status::IDLE,
            activity: String::new(),
            claims: claims.iter().map(|s| s.to_string()).collect(),
            updated_at: 1_000,
        }
    }

    /// `records` keyed as the host keeps them.
    fn set(records: &[ActiveRecord]) -> Peers {
        records.iter().map(|r| (Arc::from(r.key()), Arc::new(r.clone()))).collect()
    }

    #[test]
    fn hostile_characters_are_stripped_and_text_capped() {
        let mut r = rec("s:/a", 5, &["/w"], &[]);
        r.activity = format!("\u{1b}[2Jred\u{202E}txt\u{7}{}", "x".repeat(500));
        r.host = "h\u{2066}ost\r\n".to_owned();
        let bytes = serde_json::to_vec(&r).unwrap();
        let parsed = parse_record(&bytes, 1_000).unwrap();
        assert!(parsed.activity.starts_with("[2Jredtxt"), "{}", parsed.activity);
        assert_eq!(parsed.activity.chars().count(), ACTIVITY_MAX_CHARS);
        assert_eq!(parsed.host, "host");
        assert!(!parsed.activity.chars().any(is_hostile_char));
    }

    #[test]
    fn path_lists_are_capped_and_relative_paths_dropped() {
        let claims: Vec<String> = (0..200).map(|i| format!("/w/f{i:03}")).collect();
        let mut r = rec("s:/a", 5, &["/w", "relative", "/w/./x/../y"], &[]);
        r.claims = claims;
        r.claims.push("not/absolute".to_owned());
        let parsed = parse_record(&serde_json::to_vec(&r).unwrap(), 1_000).unwrap();
        assert_eq!(parsed.claims.len(), CLAIMS_MAX);
        assert_eq!(parsed.working_directories, vec!["/w".to_owned(), "/w/y".to_owned()]);
    }

    #[test]
    fn malformed_and_future_records_are_refused() {
        assert!(matches!(parse_record(br#"{"pid":"#, 0), Err(Refusal::Malformed(_))));
        let mut r = rec("s:/a", 5, &["/w"], &[]);
        r.updated_at = 1_000 + FUTURE_TOLERANCE_MS + 1;
        assert_eq!(parse_record(&serde_json::to_vec(&r).unwrap(), 1_000), Err(Refusal::FutureDated));
        r.updated_at = 1_000;
        r.version = 2;
        assert_eq!(parse_record(&serde_json::to_vec(&r).unwrap(), 1_000), Err(Refusal::Version(2)));
        r.version = 1;
        r.pid = 0;
        assert_eq!(parse_record(&serde_json::to_vec(&r).unwrap(), 1_000), Err(Refusal::BadField("pid")));
        assert_eq!(peek_pid(br#"{"pid":"#), None);
        assert_eq!(peek_pid(br#"{"pid": 42}"#), Some(42));
    }

    #[test]
    fn parsing_again_answers_as_parsing_the_same_bytes() {
        let mut r = rec("s:/a", 5, &["/w/./x", "/w"], &["/w/b", "/w/a", "/w/a"]);
        r.activity = "ed\u{1b}it".to_owned();
        let bytes = serde_json::to_vec(&r).unwrap();
        let first = parse_record(&bytes, 1_000).unwrap();
        for now in [1_000, 1_000 - FUTURE_TOLERANCE_MS, 1_000 - FUTURE_TOLERANCE_MS - 1, 0, i64::MIN, i64::MAX] {
            assert_eq!(parse_record_again(&first, now), parse_record(&bytes, now), "at {now}");
        }
    }

    #[test]
    fn clean_text_keeps_clean_text_and_cleans_the_rest() {
        assert_eq!(clean_text("plain", 5), "plain");
        assert_eq!(clean_text("plain", 4), "plai");
        assert_eq!(clean_text("a\u{7}b", 5), "ab");
        assert_eq!(clean_owned("a\u{202E}bc".to_owned(), 2), "ab");
        assert_eq!(clean_owned("abc".to_owned(), 3), "abc");
        assert_eq!(clean_text("", 0), "");
    }

    #[test]
    fn a_record_is_stale_when_its_writer_is_gone_or_its_pid_reused() {
        let r = rec("s:/a", 5, &["/w"], &[]);
        let alive = ProcessObservation { pid: 5, alive: true, start: Some(77) };
        assert_eq!(judge(&r, "h", Some(&alive), 1_000), Liveness::Live);
        let gone = ProcessObservation { alive: false, start: None, ..alive };
        assert!(matches!(judge(&r, "h", Some(&gone), 1_000), Liveness::Stale(_)));
        let reused = ProcessObservation { start: Some(78), ..alive };
        assert!(matches!(judge(&r, "h", Some(&reused), 1_000), Liveness::Stale(_)));
        assert!(matches!(judge(&r, "h", None, 1_000), Liveness::Stale(_)));
        let other_pid = ProcessObservation { pid: 6, ..alive };
        assert!(matches!(judge(&r, "h", Some(&other_pid), 1_000), Liveness::Stale(_)));
        // Another machine's record cannot be checked by pid: age decides.
        assert_eq!(judge(&r, "elsewhere", None, 1_000), Liveness::Live);
        assert!(matches!(judge(&r, "h", Some(&alive), 1_000 + EXPIRE_AFTER_MS + 1), Liveness::Stale(_)));
    }

    #[test]
    fn peers_are_the_other_records_of_the_workspace() {
        let me = rec("s:/me", 5, &["/w/proj"], &[]);
        let same_dir = rec("s:/b", 5, &["/w/proj/sub"], &[]);
        let elsewhere = rec("s:/c", 9, &["/other"], &[]);
        let mut same_repo = rec("s:/d", 9, &["/repo/x"], &[]);
        same_repo.repository = Some("/repo".into());
        let mut me_repo = me.clone();
        me_repo.repository = Some("/repo".into());
        let live = set(&[me.clone(), same_dir.clone(), elsewhere, same_repo.clone()]);
        let peers = peers_of(&me, &live);
        assert_eq!(peers.keys().map(|k| k.to_string()).collect::<Vec<_>>(), vec![same_dir.key()]);
        let peers = peers_of(&me_repo, &live);
        assert_eq!(peers.len(), 2, "{peers:?}");
        assert!(peers.contains_key(same_repo.key().as_str()));
    }

    #[test]
    fn warnings_name_shared_index_overlap_and_drift() {
        let mut me = rec("s:/me", 5, &["/r"], &["/r/src/a.ts", "/r/b"]);
        me.repository = Some("/r".into());
        me.head = Some("bbbb".into());
        let mut peer = rec("s:/p", 6, &["/r"], &["/r/src/a.ts"]);
        peer.repository = Some("/r".into());
        let peers = peers_of(&me, &set(&[peer.clone()]));
        let w = warnings(Tier::Warn, &me, Some("aaaa"), &peers);
        let kinds: Vec<WarningKind> = w.iter().map(|w| w.kind).collect();
        assert_eq!(kinds, vec![WarningKind::SharedIndex, WarningKind::PathOverlap, WarningKind::RepositoryDrift]);
        assert_eq!(w[1].paths, vec!["/r/src/a.ts".to_owned()]);
        assert!(warnings(Tier::Passive, &me, Some("aaaa"), &peers).is_empty());
        // Same branch in two working trees.
        let mut a = rec("s:/a", 5, &["/w1"], &[]);
        a.branch = Some("main".into());
        let mut b = rec("s:/b", 6, &["/w1/x"], &[]);
        b.branch = Some("main".into());
        let mut c = rec("s:/c", 7, &["/w1/y"], &[]);
        c.branch = Some("main".into());
        let w = warnings(Tier::Coordinate, &a, None, &peers_of(&a, &set(&[b, c])));
        assert_eq!(w.iter().map(|w| w.kind).collect::<Vec<_>>(), vec![WarningKind::SameBranch, WarningKind::SameBranch]);
        // `_meta` shows one line per kind, the rest by `ahpd/listPeers`.
        let summary = summarize(&w);
        assert_eq!(summary.len(), 1);
        assert_eq!((summary[0].kind, summary[0].count), (WarningKind::SameBranch, 2));
        assert!(summary[0].message.ends_with("(and 1 more)"), "{summary:?}");
    }

    /// `records` as the peers of a session of `/w` that is not among them.
    fn seen(records: &[ActiveRecord]) -> PeerSet {
        peers_of(&rec("s:/observer", 1, &["/w"], &[]), &set(records))
    }

    #[test]
    fn the_sessions_of_one_folder_share_one_map_and_each_leaves_itself_out() {
        let (a, b, c) = (rec("s:/a", 5, &["/w"], &[]), rec("s:/b", 5, &["/w"], &[]), rec("s:/c", 5, &["/w/sub"], &[]));
        let live = set(&[a.clone(), b.clone(), c.clone()]);
        let (mut of_a, mut of_b) = (peers_of(&a, &live), peers_of(&b, &live));
        assert!(of_b.share(&of_a), "same workspace, same records: one map");
        assert!(Arc::ptr_eq(&of_a.workspace, &of_b.workspace));
        assert_eq!(of_a.keys().map(|k| k.to_string()).collect::<Vec<_>>(), vec![b.key(), c.key()]);
        assert_eq!(of_b.keys().map(|k| k.to_string()).collect::<Vec<_>>(), vec![a.key(), c.key()]);
        assert_eq!((of_a.len(), of_b.len()), (2, 2));
        assert!(!of_a.contains_key(&a.key()) && of_b.contains_key(&a.key()));
        assert!(diff(&of_a, &of_a.clone()).is_empty());
        // The session's own record coming or going is no peer event.
        let without_a = peers_of(&a, &set(&[b.clone(), c.clone()]));
        assert_eq!((without_a.len(), of_a.len()), (2, 2));
        assert!(diff(&without_a, &of_a).is_empty() && diff(&of_a, &without_a).is_empty());
        // Another copy of a record (a new heartbeat with a change): no
        // longer the same map.
        let mut busy = c.clone();
        busy.activity = "editing".into();
        let moved = set(&[a.clone(), b.clone(), busy]);
        let mut of_a2 = peers_of(&a, &moved);
        assert!(!of_a2.share(&of_b));
        assert_eq!(diff(&of_a, &of_a2), vec![(PeerEventKind::Updated, Arc::from(c.key()))]);
        // A session elsewhere sees other records.
        let d = rec("s:/d", 5, &["/elsewhere"], &[]);
        let mut of_d = peers_of(&d, &live);
        assert!(of_d.is_empty() && !of_d.share(&of_a));
        of_a = of_a2;
        assert!(of_a.get(&a.key()).is_none() && of_a.get(&b.key()).is_some());
    }

    #[test]
    fn heartbeat_noise_is_no_update() {
        let set = |records: &[ActiveRecord]| seen(records);
        let a = rec("s:/a", 5, &["/w"], &["/w/x"]);
        let old = set(&[a.clone()]);
        let key = |r: &ActiveRecord| -> Arc<str> { Arc::from(r.key()) };
        let mut beat = a.clone();
        beat.updated_at += 5_000;
        assert!(diff(&old, &set(&[beat.clone()])).is_empty());
        let mut claimed = beat.clone();
        claimed.claims.push("/w/y".into());
        assert_eq!(diff(&old, &set(&[claimed])), vec![(PeerEventKind::Updated, key(&a))]);
        let mut busy = beat.clone();
        busy.activity = "editing".into();
        assert_eq!(diff(&old, &set(&[busy])), vec![(PeerEventKind::Updated, key(&a))]);
        let b = rec("s:/b", 5, &["/w"], &[]);
        assert_eq!(diff(&old, &set(&[b.clone()])), vec![(PeerEventKind::Joined, key(&b)), (PeerEventKind::Left, key(&a))]);
        assert!(!a.differs_beyond_heartbeat(&beat));
    }

    #[test]
    fn tiers_come_from_the_session_config() {
        let mut c = serde_json::Map::new();
        assert_eq!(Tier::of_config(&c), Tier::Warn);
        c.insert(TIER_KEY.into(), "coordinate".into());
        assert_eq!(Tier::of_config(&c), Tier::Coordinate);
        c.insert(TIER_KEY.into(), "passive".into());
        assert_eq!(Tier::of_config(&c), Tier::Passive);
        c.insert(TIER_KEY.into(), "bogus".into());
        assert_eq!(Tier::of_config(&c), Tier::Warn);
        assert!(!auto_approve(&c));
        c.insert(AUTO_APPROVE_KEY.into(), true.into());
        assert!(auto_approve(&c));
    }

    #[test]
    fn paths_normalise_and_overlap_by_component() {
        assert_eq!(normalize_path("/a/./b/../c/"), Some("/a/c".into()));
        assert_eq!(normalize_path("/../.."), Some("/".into()));
        assert_eq!(normalize_path("a"), None);
        for (path, normal) in [("/", "/"), ("/a/b", "/a/b"), ("//", "/"), ("/a//b", "/a/b"), ("/a/", "/a"), ("/a/.", "/a"), ("/a/..", "/"), ("/.a/..b", "/.a/..b")] {
            assert_eq!(normalize_path(path).as_deref(), Some(normal), "{path}");
        }
        assert_eq!(join(Some("/w"), "src/a.ts"), Some("/w/src/a.ts".into()));
        assert_eq!(join(None, "src/a.ts"), None);
        assert_eq!(uri_to_path("file:///tmp/my%20dir"), Some("/tmp/my dir".into()));
        assert_eq!(uri_to_path("https://x"), None);
        assert!(overlaps("/w/src", "/w/src/a.ts"));
        assert!(!overlaps("/w/src", "/w/srcx"));
    }
}
