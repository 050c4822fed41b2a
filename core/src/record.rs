//! What the host keeps of its own about a session: the durable record the
//! store writes, one per session (Sessions page, "The life of a session":
//! "what is this host's own is the read and archived bits, the settings
//! chosen, the owner and who sent each turn").
//!
//! The conversation itself is the backend's: turns come back from the
//! backend's own transcript when a session is resumed.

use ahp_types::state::ChangesSummary;
use ahp_types::Uri;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub mod status;

/// Who sent each turn of a chat, by turn id (Sessions page: "what is this
/// host's own is ... who sent each turn"; the export's audit trail). It
/// has an entry for every turn the chat ever ran, and every store write of
/// the session carries its record: the map is shared between the record
/// and the writes in flight and copied only when a turn is added while
/// one still holds it, so a long chat's turn does not copy every earlier
/// turn's sender (issue 21, fan-out). Written as a JSON object, as before.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Senders(Option<std::sync::Arc<BTreeMap<String, String>>>);

impl Senders {
    /// The sender of turn `turn_id`, if recorded.
    pub fn get(&self, turn_id: &str) -> Option<&String> {
        self.0.as_ref().and_then(|m| m.get(turn_id))
    }

    /// Records `sender` for `turn_id` (replacing one recorded before).
    pub fn insert(&mut self, turn_id: String, sender: String) {
        std::sync::Arc::make_mut(self.0.get_or_insert_with(Default::default)).insert(turn_id, sender);
    }

    /// How many turns have a recorded sender.
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |m| m.len())
    }

    /// Whether no turn has one.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl FromIterator<(String, String)> for Senders {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(pairs: I) -> Senders {
        let map: BTreeMap<String, String> = pairs.into_iter().collect();
        Senders((!map.is_empty()).then(|| std::sync::Arc::new(map)))
    }
}

impl Serialize for Senders {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            Some(map) => map.serialize(serializer),
            None => BTreeMap::<String, String>::new().serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for Senders {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Senders, D::Error> {
        Ok(BTreeMap::<String, String>::deserialize(deserializer)?.into_iter().collect())
    }
}

/// A record's short text (provider, ISO times): a string of up to 24 bytes
/// is held inline, with no allocation of its own (`compact_str`); longer
/// text is on the heap as a `String`'s. Serialized and parsed exactly as a
/// `String` (issue 21: memory per catalogue row: every allocation costs a
/// catalogue row its malloc overhead besides the text).
pub type Text = compact_str::CompactString;

/// A record's ISO-8601 time (`createdAt`, `modifiedAt`), kept as the
/// number it reads as: 16 bytes where its text took 24 inline (issue 21:
/// memory per catalogue row, three of them a row). A text that is not the
/// number's own ([`crate::time::WallTime::to_iso_text`]: no milliseconds,
/// an offset, or no time at all) is held as written, behind one thin
/// pointer, so a record is serialized back exactly as it was read.
/// Serialized and parsed as the text; compares as the text.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Stamp {
    /// The time, when the text is its own; otherwise what the held text
    /// parses to (the epoch when it does not).
    at: crate::time::WallTime,
    /// The text as written, when it is not `at`'s own.
    odd: Option<Box<String>>,
}

impl Stamp {
    /// The stamp of `at`, written as its own text.
    pub fn at(at: crate::time::WallTime) -> Stamp {
        Stamp { at, odd: None }
    }

    /// `text` as a stamp: kept as its time when it is that time's own text,
    /// else held as written.
    pub fn from_text(text: &str) -> Stamp {
        match crate::time::WallTime::parse_iso(text) {
            Some(at) if at.to_iso_text() == text => Stamp { at, odd: None },
            at => Stamp { at: at.unwrap_or_default(), odd: Some(Box::new(text.to_owned())) },
        }
    }

    /// The time the text says, or `None` when it is no time.
    pub fn time(&self) -> Option<crate::time::WallTime> {
        match &self.odd {
            None => Some(self.at),
            Some(text) => crate::time::WallTime::parse_iso(text),
        }
    }

    /// The text, as it will be written.
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        match &self.odd {
            None => std::borrow::Cow::Owned(self.at.iso().to_string()),
            Some(text) => std::borrow::Cow::Borrowed(text.as_str()),
        }
    }
}

impl From<&str> for Stamp {
    fn from(text: &str) -> Stamp {
        Stamp::from_text(text)
    }
}

impl From<String> for Stamp {
    fn from(text: String) -> Stamp {
        Stamp::from_text(&text)
    }
}

impl std::fmt::Display for Stamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.odd {
            None => self.at.iso().fmt(f),
            Some(text) => f.write_str(text),
        }
    }
}

impl std::fmt::Debug for Stamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.to_string())
    }
}

impl Serialize for Stamp {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match &self.odd {
            None => self.at.iso().serialize(serializer),
            Some(text) => serializer.serialize_str(text),
        }
    }
}

impl<'de> Deserialize<'de> for Stamp {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Stamp, D::Error> {
        Ok(Stamp::from_text(&String::deserialize(deserializer)?))
    }
}

/// A session's chosen settings (`SessionRecord::config`), held out of line:
/// a JSON object map is 72 bytes inline, and most catalogue rows (every
/// external session, every one stored before settings were kept) have
/// none, so a record pays one pointer until it has some (issue 21: memory
/// per catalogue row). Reads through it see the map (an empty one when
/// none is held); a write (`&mut` use) allocates it. Serialized, parsed
/// and compared as the map.
#[derive(Clone, Default)]
pub struct Settings(Option<Box<serde_json::Map<String, serde_json::Value>>>);

impl Settings {
    /// The empty map every `Settings` with none reads as.
    fn empty() -> &'static serde_json::Map<String, serde_json::Value> {
        static EMPTY: std::sync::OnceLock<serde_json::Map<String, serde_json::Value>> = std::sync::OnceLock::new();
        EMPTY.get_or_init(serde_json::Map::new)
    }
}

impl From<serde_json::Map<String, serde_json::Value>> for Settings {
    fn from(map: serde_json::Map<String, serde_json::Value>) -> Settings {
        Settings((!map.is_empty()).then(|| Box::new(map)))
    }
}

impl std::ops::Deref for Settings {
    type Target = serde_json::Map<String, serde_json::Value>;

    fn deref(&self) -> &Self::Target {
        self.0.as_deref().unwrap_or_else(|| Settings::empty())
    }
}

impl std::ops::DerefMut for Settings {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.0.get_or_insert_with(Default::default)
    }
}

impl PartialEq for Settings {
    fn eq(&self, other: &Settings) -> bool {
        **self == **other
    }
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl Serialize for Settings {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Settings {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Settings, D::Error> {
        serde_json::Map::deserialize(deserializer).map(Settings::from)
    }
}

/// A chat record's rarely used list (`ChatRecord::written`, `kept`,
/// `forgetting`, `seed`, `queued`; and a record's `shared_trees`), held
/// out of line: a `Vec` or a `BTreeSet` is 24 bytes inline, and most chats
/// of a catalogue row have neither, so a chat pays one pointer until it
/// has some (issue 21: memory per catalogue row). Reads through it see the
/// list (an empty one when none is held); a write (`&mut` use) allocates
/// it. Serialized, parsed and compared as the list.
#[derive(Clone, Default)]
pub struct Rare<T>(Option<Box<T>>);

/// What [`Rare`] can hold: a list with an empty value every `Rare` of none
/// reads as.
pub trait RareList: Default + PartialEq + 'static {
    /// Whether it holds nothing (then a `Rare` keeps none).
    fn is_empty_list(&self) -> bool;
    /// The empty list.
    fn empty() -> &'static Self;
}

/// [`RareList`] and parsing (at its exact size, as [`exact_vec`]) for a
/// `Rare` list of each of these item types.
macro_rules! rare_vec {
    ($($item:ty),*) => {$(
        impl RareList for Vec<$item> {
            fn is_empty_list(&self) -> bool {
                self.is_empty()
            }

            fn empty() -> &'static Self {
                static EMPTY: Vec<$item> = Vec::new();
                &EMPTY
            }
        }

        impl<'de> Deserialize<'de> for Rare<Vec<$item>> {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Rare<Vec<$item>>, D::Error> {
                exact_vec(deserializer).map(Rare::from)
            }
        }
    )*};
}

rare_vec!(crate::kept_turns::KeptTurn, String, ahp_types::state::Turn, QueuedMessage, crate::git::SharedTree);

impl RareList for std::collections::BTreeSet<String> {
    fn is_empty_list(&self) -> bool {
        self.is_empty()
    }

    fn empty() -> &'static Self {
        static EMPTY: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
        &EMPTY
    }
}

impl<T: RareList> Rare<T> {
    /// Whether the list is empty (for `skip_serializing_if`).
    pub fn is_empty(&self) -> bool {
        self.0.as_deref().is_none_or(T::is_empty_list)
    }
}

impl<T: RareList> From<T> for Rare<T> {
    fn from(list: T) -> Rare<T> {
        Rare((!list.is_empty_list()).then(|| Box::new(list)))
    }
}

impl<T: RareList> std::ops::Deref for Rare<T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.0.as_deref().unwrap_or_else(|| T::empty())
    }
}

impl<T: RareList> std::ops::DerefMut for Rare<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.0.get_or_insert_with(Default::default)
    }
}

impl<'a, T: RareList> IntoIterator for &'a Rare<T>
where
    &'a T: IntoIterator,
{
    type Item = <&'a T as IntoIterator>::Item;
    type IntoIter = <&'a T as IntoIterator>::IntoIter;

    fn into_iter(self) -> Self::IntoIter {
        (**self).into_iter()
    }
}

impl<T: RareList> PartialEq for Rare<T> {
    fn eq(&self, other: &Rare<T>) -> bool {
        **self == **other
    }
}

impl<T: RareList + std::fmt::Debug> std::fmt::Debug for Rare<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl<T: RareList + Serialize> Serialize for Rare<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Rare<std::collections::BTreeSet<String>> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Rare<std::collections::BTreeSet<String>>, D::Error> {
        std::collections::BTreeSet::deserialize(deserializer).map(Rare::from)
    }
}

/// A session's working directories (`SessionRecord::working_directories`),
/// shared between the records that list the same folders: a catalogue's
/// rows share a few folders, and a list of its own cost every row a `Vec`
/// and a copy of each URI (~100 bytes; issue 21: memory per catalogue
/// row). The session table hands each record it takes the one copy of its
/// list ([`Folders::intern`]). Reads see the list (an empty one when none
/// is held); a write (`&mut` use) copies it first when it is shared, so no
/// other record sees the change. Serialized, parsed and compared as the
/// list.
#[derive(Clone, Default)]
pub struct Folders(Option<std::sync::Arc<Vec<Uri>>>);

/// The lists [`Folders::intern`] shares, each once, in a fixed order.
pub type FolderPool = std::collections::BTreeSet<std::sync::Arc<Vec<Uri>>>;

impl Folders {
    /// Makes this list the pool's copy of the same folders, adding it to
    /// `pool` when it has none: equal lists interned in one pool share one
    /// allocation. An empty list holds none.
    pub fn intern(&mut self, pool: &mut FolderPool) {
        let Some(list) = &self.0 else { return };
        if list.is_empty() {
            self.0 = None;
            return;
        }
        match pool.get(&**list) {
            Some(shared) => {
                if !std::sync::Arc::ptr_eq(shared, list) {
                    self.0 = Some(shared.clone());
                }
            }
            None => {
                pool.insert(list.clone());
            }
        }
    }

    /// Takes this list's copy out of `pool` when this record was its last
    /// holder besides the pool (the session is leaving the table), so the
    /// pool holds only lists some record still lists.
    pub fn release(&self, pool: &mut FolderPool) {
        if let Some(list) = &self.0 {
            if std::sync::Arc::strong_count(list) == 2 && pool.get(&**list).is_some_and(|p| std::sync::Arc::ptr_eq(p, list)) {
                pool.remove(&**list);
            }
        }
    }
}

impl From<Vec<Uri>> for Folders {
    fn from(list: Vec<Uri>) -> Folders {
        Folders((!list.is_empty()).then(|| std::sync::Arc::new(list)))
    }
}

impl FromIterator<Uri> for Folders {
    fn from_iter<I: IntoIterator<Item = Uri>>(list: I) -> Folders {
        Folders::from(list.into_iter().collect::<Vec<Uri>>())
    }
}

impl std::ops::Deref for Folders {
    type Target = Vec<Uri>;

    fn deref(&self) -> &Vec<Uri> {
        static EMPTY: Vec<Uri> = Vec::new();
        self.0.as_deref().unwrap_or(&EMPTY)
    }
}

impl std::ops::DerefMut for Folders {
    fn deref_mut(&mut self) -> &mut Vec<Uri> {
        std::sync::Arc::make_mut(self.0.get_or_insert_with(Default::default))
    }
}

impl<'a> IntoIterator for &'a Folders {
    type Item = &'a Uri;
    type IntoIter = std::slice::Iter<'a, Uri>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl PartialEq for Folders {
    fn eq(&self, other: &Folders) -> bool {
        **self == **other
    }
}

impl std::fmt::Debug for Folders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl Serialize for Folders {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Folders {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Folders, D::Error> {
        exact_vec(deserializer).map(Folders::from)
    }
}

/// A record's text that, as a rule, follows from the session URI
/// (`SessionRecord::key`, `SessionRecord::default_chat`): held only when it
/// is not the text the URI gives (a record stored with another key, which
/// the host refuses to restore, or a default chat of its own), and read
/// back from the URI otherwise (issue 21: memory per catalogue row; the
/// two were ~96 bytes of every row). A record parsed from the store holds
/// none that it can derive ([`SessionRecord::compact`] drops one set in
/// code). Serialized and parsed as the text, through the record. Held
/// behind one thin pointer (a `Box<str>` is two words, and none is held in
/// almost every row: 8 bytes a row each).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Derived(Option<Box<String>>);

impl Derived {
    /// `text`, held as given (the record drops it if the URI gives it).
    pub fn held(text: impl Into<String>) -> Derived {
        Derived(Some(Box::new(text.into())))
    }

    /// Whether text is held (rather than read from the URI).
    pub fn is_held(&self) -> bool {
        self.0.is_some()
    }
}

impl std::fmt::Debug for Derived {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(text) => text.fmt(f),
            None => f.write_str("(from the URI)"),
        }
    }
}

impl Serialize for Derived {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.0.as_deref().map_or("", String::as_str))
    }
}

impl<'de> Deserialize<'de> for Derived {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Derived, D::Error> {
        String::deserialize(deserializer).map(Derived::held)
    }
}

/// The `(scheme, id)` of a session URI `<scheme>:/<id>`, split as
/// `ids::ResourceId::parse` splits it (not validated).
fn uri_parts(uri: &str) -> Option<(&str, &str)> {
    uri.split_once(":/")
}

/// Whether `text` is `<prefix><scheme>@<id>` for the URI's parts.
fn is_named(text: &str, prefix: &str, uri: &str) -> bool {
    let Some((scheme, id)) = uri_parts(uri) else { return false };
    text.len() == prefix.len() + scheme.len() + 1 + id.len()
        && text.strip_prefix(prefix).and_then(|t| t.strip_prefix(scheme)).and_then(|t| t.strip_prefix('@')) == Some(id)
}

/// Version of the record layout written by this build.
pub const RECORD_FORMAT: u32 = 1;

/// One session's durable record. Written whole, atomically, by the store.
/// Its store key and default chat URI are kept only when the session URI
/// does not give them ([`Derived`]); read them with
/// [`SessionRecord::key`] and [`SessionRecord::default_chat`]. Compared by
/// what it reads as, not by what it holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(remote = "Self", rename_all = "camelCase")]
pub struct SessionRecord {
    /// Layout version ([`RECORD_FORMAT`]).
    pub format: u32,
    /// The validated store key derived from the session URI
    /// (`ids::ResourceId::store_key`); names the file. Held only when it is
    /// not the URI's ([`SessionRecord::key`] reads it).
    #[serde(getter = "SessionRecord::key_text")]
    pub key: Derived,
    /// The session URI the client chose.
    pub resource: Uri,
    /// The backend that runs it (inline: [`Text`]).
    pub provider: Text,
    /// The session's title (a `Box<str>`: a title is set whole, so the
    /// `String`'s capacity word is spent for nothing).
    pub title: Box<str>,
    /// When the session was first started (ISO-8601, [`Stamp`]); never
    /// moves.
    pub created_at: Stamp,
    /// The last change (ISO-8601, [`Stamp`]); only moves forward.
    pub modified_at: Stamp,
    /// The host's own read bit (status bit 32).
    pub is_read: bool,
    /// The host's own archived bit (status bit 64).
    pub is_archived: bool,
    /// The directories the agent may touch; the first is the process root
    /// (shared with other records listing the same: [`Folders`]).
    pub working_directories: Folders,
    /// The settings chosen.
    #[serde(default)]
    pub config: Settings,
    /// Whose work it is (`user:<id>`, `root:<host>`), if anybody's (a
    /// boxed `str`: 16 bytes of every row, not a `String`'s 24; issue 21).
    #[serde(default)]
    pub owner: Option<Box<str>>,
    /// The team/project it is charged to, if any (boxed, as `owner`).
    #[serde(default)]
    pub scope: Option<Box<str>>,
    /// The default chat's URI: `ahp-chat:/<store key>` as a rule
    /// (`ids::ResourceId::default_chat_uri`); held only when it is another
    /// ([`SessionRecord::default_chat`] reads it).
    #[serde(getter = "SessionRecord::default_chat_text")]
    pub default_chat: Derived,
    /// The chats, in the session's order.
    #[serde(deserialize_with = "exact_vec")]
    pub chats: Vec<ChatRecord>,
    /// The diff stat last read for the session, if any (boxed: most rows
    /// have none, and inline it was 48 bytes of every row; issue 21).
    #[serde(default)]
    pub changes: Option<Box<ChangesSummary>>,
    /// What the session did with git: the repository it is in, the tree it
    /// made, the checkpoints written (Sessions page, "Isolation and
    /// worktrees"). `None` until its first send asked git.
    #[serde(default)]
    pub git: Option<Box<crate::git::GitRecord>>,
    /// A session a backend lists that this host never ran (Sessions page:
    /// "external"), until a person's turn adopts it.
    #[serde(default)]
    pub external: bool,
    /// What the session's folder was offered when it was made (Sessions
    /// page, "Configuration keys"), from which the `config` its state
    /// reports is composed. `None` for a session this host never made (an
    /// external one) or one stored before it was kept: such a session
    /// reports no config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offer: Option<Box<crate::session_config::ConfigOffer>>,
    /// The window's tree the session was made in, if it was made in one
    /// (see [`crate::git::TreeOrigin`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_tree: Option<Box<crate::git::TreeOrigin>>,
    /// Trees other sessions made that this one works in, handed to it when
    /// their maker was disposed ([`crate::git::SharedTree`]). Never
    /// archived (they stay on disk while a holder exists); removed with
    /// the last session that works in them.
    #[serde(default, skip_serializing_if = "Rare::is_empty")]
    pub shared_trees: Rare<Vec<crate::git::SharedTree>>,
    /// A tombstone: the session was disposed, and this record stays only
    /// so a backend's copy that outlives the dispose (a transcript its CLI
    /// keeps, or one put back from a backup) is not listed again after a
    /// restart (Sessions page, "The life of a session": disposeSession
    /// "drops the row"). Removed by the first pass over the backend's
    /// transcripts that no longer finds any of its chats. Never a session.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
    /// What the host tools keep on the session (issue 24): the wakes its
    /// agents asked for. Boxed: nearly every row has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Box<ToolsRecord>>,
}

/// What the host tools keep on a session ([`SessionRecord::tools`]).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolsRecord {
    /// The wakes waiting, in the order they were asked for (at most
    /// `tools::MAX_WAKES_PER_SESSION`). A wake is taken off in the same
    /// write that queues its prompt, so it fires exactly once
    /// (docs/DECISIONS.md, 20).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wakes: Vec<ScheduledWake>,
    /// The number the next wake's id takes (`wake-<n>`): ids are never
    /// reused within a session.
    #[serde(default)]
    pub next_wake: u64,
    /// The session whose agent made this one with `start_child_session`,
    /// and what this child owes it (docs/DECISIONS.md, 24).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ChildOf>,
    /// The children this session's agents made, at most
    /// `tools::MAX_CHILDREN_PER_SESSION`, with how many of each one's turn
    /// ends were delivered here as `childFinished`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<ChildEntry>,
    /// The automation run this session was made for (AHP's
    /// `AutomationSessionOrigin`), said as the state's `origin`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub automation: Option<AutomationOrigin>,
}

/// A child session's link to its parent ([`ToolsRecord::parent`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildOf {
    /// The parent session's URI.
    pub session: Uri,
    /// How many turn ends of this child were numbered (the last one's
    /// number): the parent has been told of them when its
    /// [`ChildEntry::delivered`] is as high. Written in the same record
    /// write as the turn's end.
    #[serde(default)]
    pub finished: u64,
    /// The last turn end, what the parent's `childFinished` carries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<ChildFinish>,
}

/// One turn end of a child session, as its parent is told of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildFinish {
    /// The child's chat the turn ran in.
    pub chat: Uri,
    /// The turn's id.
    pub turn_id: String,
    /// How it ended: `complete`, `error` or `cancelled`.
    pub status: String,
    /// Its reply's text (bounded: `tools::MAX_CHILD_REPLY_BYTES`).
    pub reply: String,
}

/// One child of a session ([`ToolsRecord::children`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildEntry {
    /// The child session's URI.
    pub session: Uri,
    /// The number of the child's last turn end delivered here (written in
    /// the same record write as the `childFinished` message it queued), so
    /// each is delivered exactly once ([`ChildOf::finished`]).
    #[serde(default)]
    pub delivered: u64,
}

/// The automation and run a session was made for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AutomationOrigin {
    /// `ahp-automation:/<id>`.
    pub automation: Uri,
    /// `ahp-automation-run:/<id>.<n>`.
    pub run: Uri,
}

/// One wake an agent asked for with `schedule_wakeup`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduledWake {
    /// Its id in the session (`wake-<n>`).
    pub id: String,
    /// The chat whose agent asked: its prompt starts a turn there.
    pub chat: Uri,
    /// When it is due, wall-clock ms since the epoch (a wall time, so it
    /// means the same after a restart).
    pub at: crate::time::WallTime,
    /// The prompt its turn starts with.
    pub prompt: String,
}

/// One chat's durable record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChatRecord {
    /// The chat URI.
    pub resource: Uri,
    /// The chat's title (a `Box<str>`, as the session's).
    pub title: Box<str>,
    /// The backend's id for the conversation (may differ from the client's;
    /// a `Box<str>`: set whole, like the title).
    pub conversation_id: Box<str>,
    /// The chat's own `modifiedAt` (ISO-8601, [`Stamp`]).
    pub modified_at: Stamp,
    /// The chat's status bits at rest (Idle 1 or Error 2, plus flags).
    pub status: u32,
    /// True until the chat's agent first started: its conversation does not
    /// exist yet, so a wake starts it afresh rather than resuming it.
    #[serde(default)]
    pub fresh: bool,
    /// Its backend's transcript of the conversation could not be read back
    /// (issue 25, `session/damage.rs`): the chat's status rests at Error
    /// and its session's row says what to do, until a start of its agent
    /// reads the conversation again. (A `bool` beside `fresh`: in the
    /// padding, no byte more per chat.)
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub damaged: bool,
    /// Who sent each turn, by turn id: the sender's principal, or its
    /// client id on a host with no users directory.
    #[serde(default)]
    pub senders: Senders,
    /// The chat's own change count (Sessions page, "The state a session
    /// reports"): the default chat carries the session's Session Changes,
    /// another chat the files its own tools were seen to write. `None`
    /// until there is something to count (boxed, as the session's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<Box<ahp_types::state::ChangesSummary>>,
    /// The files this chat's own tools were seen to write, across turns
    /// (absolute paths, at most `session::changes::WRITTEN_MAX`); the count of a
    /// chat that is not the default one.
    #[serde(default, skip_serializing_if = "Rare::is_empty")]
    pub written: Rare<std::collections::BTreeSet<String>>,
    /// Turns the host keeps until the backend's history has them: echoed
    /// turns still running, and turns the host ended itself
    /// ([`crate::kept_turns`]).
    #[serde(default, skip_serializing_if = "Rare::is_empty")]
    pub kept: Rare<Vec<crate::kept_turns::KeptTurn>>,
    /// The chat's draft (`chat/draftChanged`), kept across sleep, eviction
    /// and restart; written without a wake (Sessions page, "Sleep and
    /// wake": "A config change and a draft are kept without a wake").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft: Option<Box<ahp_types::state::Message>>,
    /// Turns a rewind (`chat/truncated`) took away whose forget the backend
    /// has not confirmed yet (issue 23, `session/rewind.rs`): written ahead
    /// of the echo, left out of every history read back from the backend
    /// while listed, sent to the backend again whenever the chat's agent
    /// starts, and cleared once the backend says it forgot them.
    #[serde(default, skip_serializing_if = "Rare::is_empty")]
    pub forgetting: Rare<Vec<String>>,
    /// How the chat came to be, when it is a fork or a side chat
    /// (`session/fork.rs`); `None` for a chat a client made plainly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Box<ahp_types::state::ChatOrigin>>,
    /// The turns a fork was made with (its source's, through the turn it
    /// names), the host's own: put in front of the chat's backend history
    /// wherever it is read (`session::fork::with_seed`).
    #[serde(default, skip_serializing_if = "Rare::is_empty")]
    pub seed: Rare<Vec<ahp_types::state::Turn>>,
    /// The chat's queued messages (`chat/pendingMessageSet` of kind
    /// `queued`), in the order they run, each with who queued it: written
    /// ahead of their echo like a turn's sender (docs/DECISIONS.md, 2), so
    /// an acknowledged queued message is never lost across a restart, and
    /// taken off in the same write that records the turn it became, so it
    /// never runs twice (`crate::session::pending`).
    #[serde(default, skip_serializing_if = "Rare::is_empty")]
    pub queued: Rare<Vec<QueuedMessage>>,
    /// The chat's steering message (`chat/pendingMessageSet` of kind
    /// `steering`), with who sent it, kept like a queued message. No
    /// backend takes one into its running turn yet: it is held and runs as
    /// the chat's next turn, before the queued ones
    /// (`crate::session::pending`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steering: Option<Box<QueuedMessage>>,
    /// Set once the chat was moved to another session (`moveChat`, issue
    /// 23; docs/DECISIONS.md, 17): its move generation and the settings it
    /// ran on, its own from then on. `None` for a chat never moved (and in
    /// every record stored before moves were kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved: Option<Box<Moved>>,
}

/// What a chat moved between sessions carries ([`ChatRecord::moved`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Moved {
    /// How many times the chat moved to another session (1 after its first
    /// move). A move writes the destination's record with the chat under
    /// the next generation before the source's record without it; a crash
    /// between the two leaves the chat in both records, and at restore the
    /// record with the higher generation keeps it (`Host::restore`).
    pub moves: u64,
    /// The settings (the config values) of the session the chat ran in
    /// before its first move: the chat keeps them as its own (Sessions
    /// page: a chat moved to another session starts "with what it ran
    /// on"). Kept in the record only: ahp-types 1.0.0 has no action that
    /// changes a chat's `_meta` or config, so a chat's subscribers, who
    /// keep their copy across the move, could not be told of it
    /// (docs/DECISIONS.md, 17).
    #[serde(default)]
    pub config: Settings,
}

impl ChatRecord {
    /// The chat's move generation: 0 for a chat never moved
    /// ([`Moved::moves`]).
    pub fn moves(&self) -> u64 {
        self.moved.as_ref().map_or(0, |m| m.moves)
    }
}

/// One queued message of a chat ([`ChatRecord::queued`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueuedMessage {
    /// The client's id for it (`PendingMessage.id`).
    pub id: String,
    /// The message the turn it becomes starts with.
    pub message: ahp_types::state::Message,
    /// Who queued it (as a turn's sender: the principal, or the client id
    /// on a host with no users directory): the turn it becomes is recorded
    /// as sent by them.
    #[serde(default)]
    pub sender: String,
}

/// A list read with no spare room, for a record's lists: parsing grows a
/// list as it goes (a one-chat list holds room for four chats), and a
/// catalogue row keeps its record for the daemon's life. The parsed list is
/// copied into one of its exact size as soon as it is read, so the room it
/// grew is given back whole, where the next record's parse reuses it;
/// shrinking it later, in place (`SessionRecord::compact` at start, after
/// every record was read), left a hole per row beside the list it kept
/// (issue 21: memory per catalogue row).
fn exact_vec<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    let parsed = Vec::<T>::deserialize(deserializer)?;
    if parsed.len() == parsed.capacity() {
        return Ok(parsed);
    }
    let mut exact = Vec::with_capacity(parsed.len());
    exact.extend(parsed);
    Ok(exact)
}

impl ChatRecord {
    /// A chat made now (`now`), with no turns yet: idle, untitled, its
    /// conversation not begun (`fresh`), named `conversation_id` for its
    /// backend.
    pub fn new_chat(resource: Uri, conversation_id: String, now: crate::time::WallTime) -> ChatRecord {
        ChatRecord {
            resource,
            title: Box::default(),
            conversation_id: conversation_id.into(),
            modified_at: Stamp::at(now),
            status: status::IDLE,
            fresh: true,
            damaged: false,
            senders: Senders::default(),
            changes: None,
            written: Default::default(),
            kept: Default::default(),
            draft: None,
            forgetting: Default::default(),
            origin: None,
            seed: Default::default(),
            queued: Default::default(),
            steering: None,
            moved: None,
        }
    }
}

impl Serialize for SessionRecord {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        SessionRecord::serialize(self, serializer)
    }
}

impl<'de> Deserialize<'de> for SessionRecord {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<SessionRecord, D::Error> {
        let mut record = SessionRecord::deserialize(deserializer)?;
        record.derive_names();
        Ok(record)
    }
}

impl PartialEq for SessionRecord {
    fn eq(&self, other: &SessionRecord) -> bool {
        // Every field named, so a field added is compared, not skipped.
        let SessionRecord {
            format,
            key: _,
            resource,
            provider,
            title,
            created_at,
            modified_at,
            is_read,
            is_archived,
            working_directories,
            config,
            owner,
            scope,
            default_chat: _,
            chats,
            changes,
            git,
            external,
            offer,
            in_tree,
            shared_trees,
            deleted,
            tools,
        } = self;
        *format == other.format
            && self.key() == other.key()
            && *resource == other.resource
            && *provider == other.provider
            && *title == other.title
            && *created_at == other.created_at
            && *modified_at == other.modified_at
            && *is_read == other.is_read
            && *is_archived == other.is_archived
            && *working_directories == other.working_directories
            && *config == other.config
            && *owner == other.owner
            && *scope == other.scope
            && self.default_chat() == other.default_chat()
            && *chats == other.chats
            && *changes == other.changes
            && *git == other.git
            && *external == other.external
            && *offer == other.offer
            && *in_tree == other.in_tree
            && *shared_trees == other.shared_trees
            && *deleted == other.deleted
            && *tools == other.tools
    }
}

impl SessionRecord {
    /// The store key: `<scheme>@<id>` of the session URI `<scheme>:/<id>`
    /// (`ids::ResourceId::store_key`), or the one the record was stored
    /// with when that is another. Names the record's file.
    pub fn key(&self) -> std::borrow::Cow<'_, str> {
        match (&self.key.0, uri_parts(&self.resource)) {
            (Some(held), _) => std::borrow::Cow::Borrowed(held.as_str()),
            (None, Some((scheme, id))) => std::borrow::Cow::Owned(format!("{scheme}@{id}")),
            (None, None) => std::borrow::Cow::Borrowed(""),
        }
    }

    /// The default chat's URI: `ahp-chat:/<scheme>@<id>` of the session URI
    /// (`ids::ResourceId::default_chat_uri`), or the record's own when that
    /// is another.
    pub fn default_chat(&self) -> std::borrow::Cow<'_, str> {
        match (&self.default_chat.0, uri_parts(&self.resource)) {
            (Some(held), _) => std::borrow::Cow::Borrowed(held.as_str()),
            (None, Some((scheme, id))) => std::borrow::Cow::Owned(format!("ahp-chat:/{scheme}@{id}")),
            (None, None) => std::borrow::Cow::Borrowed(""),
        }
    }

    /// Whether `chat` is the default chat's URI ([`SessionRecord::default_chat`],
    /// compared without building it).
    pub fn is_default_chat(&self, chat: &str) -> bool {
        match &self.default_chat.0 {
            Some(held) => held.as_str() == chat,
            None => is_named(chat, "ahp-chat:/", &self.resource),
        }
    }

    /// Sets the default chat's URI (held only if the URI does not give it).
    pub fn set_default_chat(&mut self, chat: Uri) {
        self.default_chat = Derived::held(chat);
        self.derive_names();
    }

    /// [`SessionRecord::key`] as the serializer writes it.
    fn key_text(&self) -> Derived {
        Derived::held(self.key())
    }

    /// [`SessionRecord::default_chat`] as the serializer writes it.
    fn default_chat_text(&self) -> Derived {
        Derived::held(self.default_chat())
    }

    /// Drops the key and default chat URI held when the session URI gives
    /// the same text, so they are read from it.
    fn derive_names(&mut self) {
        if self.key.0.as_deref().is_some_and(|k| is_named(k, "", &self.resource)) {
            self.key.0 = None;
        }
        if self.default_chat.0.as_deref().is_some_and(|c| is_named(c, "ahp-chat:/", &self.resource)) {
            self.default_chat.0 = None;
        }
    }

    /// Gives back the spare capacity of its lists: a record read from the
    /// store grew them while parsing (a one-chat list holds room for four
    /// chats of ~300 bytes each), and a catalogue row keeps its record for
    /// the daemon's life (issue 21: memory per catalogue row). Drops a key
    /// or default chat URI held that the session URI gives ([`Derived`]).
    pub fn compact(&mut self) {
        self.derive_names();
        self.chats.shrink_to_fit();
        if !self.shared_trees.is_empty() {
            self.shared_trees.shrink_to_fit();
        }
        for chat in &mut self.chats {
            if !chat.kept.is_empty() {
                chat.kept.shrink_to_fit();
            }
            if !chat.queued.is_empty() {
                chat.queued.shrink_to_fit();
            }
        }
    }

    /// The record of a session `createSession` makes at `now`: `id`'s URI
    /// and store key, its settled `config` and the `offer` it was settled
    /// from, its owner and scope, the window's tree it is made in, and one
    /// default chat (`ResourceId::default_chat_uri`) whose conversation is
    /// named by the store key. Untitled, unread, unarchived, no changes.
    #[allow(clippy::too_many_arguments)]
    pub fn new_session(
        id: &crate::ids::ResourceId,
        provider: Text,
        working_directories: Vec<Uri>,
        config: serde_json::Map<String, serde_json::Value>,
        offer: crate::session_config::ConfigOffer,
        owner: Option<String>,
        scope: Option<String>,
        in_tree: Option<crate::git::TreeOrigin>,
        now: crate::time::WallTime,
    ) -> SessionRecord {
        SessionRecord {
            format: RECORD_FORMAT,
            key: Derived::default(),
            resource: id.uri(),
            provider,
            title: Box::default(),
            created_at: Stamp::at(now),
            modified_at: Stamp::at(now),
            is_read: false,
            is_archived: false,
            working_directories: working_directories.into(),
            config: config.into(),
            owner: owner.map(String::into_boxed_str),
            scope: scope.map(String::into_boxed_str),
            default_chat: Derived::default(),
            chats: vec![ChatRecord::new_chat(id.default_chat_uri(), id.store_key(), now)],
            changes: None,
            external: false,
            offer: Some(Box::new(offer)),
            in_tree: in_tree.map(Box::new),
            shared_trees: Default::default(),
            git: None,
            deleted: false,
            tools: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The store's text of a record, as written before the record held its
    /// short strings inline and its settings out of line: parsed and
    /// written again, it comes out byte for byte the same, compact and
    /// pretty (the store and the wire did not move; `RECORD_FORMAT` stays).
    #[test]
    fn a_stored_record_is_written_back_byte_for_byte() {
        let long_provider = "p".repeat(40);
        for (provider, config, created) in [
            ("echo", "{}", "2026-12-03T18:31:39.123Z"),
            (long_provider.as_str(), r#"{"isolation":"worktree","branch":"main"}"#, "2026-12-03T18:31:39Z"),
            ("claude", r#"{"z":1,"a":[true,null]}"#, "+012026-12-03T18:31:39.123Z"),
        ] {
            let text = format!(
                r#"{{"format":1,"key":"ahp-session@k","resource":"ahp-session:/k","provider":"{provider}","title":"A title","createdAt":"{created}","modifiedAt":"2026-12-03T18:31:40.000Z","isRead":true,"isArchived":false,"workingDirectories":["file:///w"],"config":{config},"owner":null,"scope":null,"defaultChat":"ahp-chat:/ahp-session@k","chats":[{{"resource":"ahp-chat:/ahp-session@k","title":"","conversationId":"c","modifiedAt":"2026-12-03T18:31:40.000Z","status":1,"fresh":false,"senders":{{}}}}],"changes":null,"git":null,"external":false}}"#
            );
            let record: SessionRecord = serde_json::from_str(&text).expect("the record parses");
            assert_eq!(serde_json::to_string(&record).expect("encodes"), text, "compact");
            let pretty = serde_json::to_string_pretty(&serde_json::from_str::<serde_json::Value>(&text).expect("json")).expect("pretty");
            assert_eq!(serde_json::to_string_pretty(&record).expect("encodes"), pretty, "pretty");
            assert_eq!(record.config.is_empty(), config == "{}");
            assert_eq!(record.provider.as_str(), provider);
        }
    }

    /// A time is held as its number when the text is the number's own, and
    /// as written otherwise (no milliseconds, an offset, no time at all),
    /// so every text comes back byte for byte and reads as the time it says.
    #[test]
    fn a_stamp_keeps_its_text_and_reads_as_its_time() {
        for (text, canonical, ms) in [
            ("2026-12-03T18:31:39.123Z", true, Some(1_796_322_699_123)),
            ("2026-12-03T18:31:39Z", false, Some(1_796_322_699_000)),
            ("2026-12-03T20:31:39.123+02:00", false, Some(1_796_322_699_123)),
            ("1970-01-01T00:00:00.000Z", true, Some(0)),
            ("yesterday", false, None),
            ("", false, None),
        ] {
            let stamp: Stamp = serde_json::from_str(&serde_json::to_string(text).expect("json")).expect("any text parses");
            assert_eq!(stamp.odd.is_none(), canonical, "{text}");
            assert_eq!(stamp.time().map(|t| t.0), ms, "{text}");
            assert_eq!(stamp.to_string(), text);
            assert_eq!(stamp.text(), text);
            assert_eq!(serde_json::to_string(&stamp).expect("encodes"), serde_json::to_string(text).expect("json"));
            assert_eq!(stamp, Stamp::from(text), "compares as its text");
        }
        let at = crate::time::WallTime(1_796_322_699_123);
        assert_eq!(Stamp::at(at), Stamp::from("2026-12-03T18:31:39.123Z"));
        assert_ne!(Stamp::at(at), Stamp::from("2026-12-03T20:31:39.123+02:00"), "the same time, written otherwise");
    }

    /// A chat's `written`, `kept`, `forgetting` and `queued` come back byte
    /// for byte whether it has them or not, and a chat without them holds
    /// none (each one pointer).
    #[test]
    fn a_chats_rare_lists_are_written_back_byte_for_byte() {
        let kept = r#"[{"id":"t1","startedAt":"2026-12-01T00:00:00.000Z","message":{"text":"hi","origin":{"kind":"user"}},"index":0}]"#;
        let queued = r#","queued":[{"id":"q1","message":{"text":"next","origin":{"kind":"user"}},"sender":"user:a"}]"#;
        for extra in [
            String::new(),
            r#","written":["/w/a","/w/b"]"#.to_owned(),
            format!(r#","kept":{kept}"#),
            format!(r#","written":["/w/a"],"kept":{kept}"#),
            r#","forgetting":["t1","t2"]"#.to_owned(),
            queued.to_owned(),
            format!(r#","kept":{kept},"forgetting":["t1"]{queued}"#),
        ] {
            let text = format!(r#"{{"resource":"ahp-chat:/x","title":"","conversationId":"c","modifiedAt":"2026-12-03T18:31:40.000Z","status":1,"fresh":false,"senders":{{}}{extra}}}"#);
            let chat: ChatRecord = serde_json::from_str(&text).expect("the chat parses");
            assert_eq!(serde_json::to_string(&chat).expect("encodes"), text);
            assert_eq!(chat.written.0.is_some(), extra.contains("written"), "held only when there is some: {extra}");
            assert_eq!(chat.kept.0.is_some(), extra.contains("kept"), "held only when there is some: {extra}");
            assert_eq!(chat.kept.len(), usize::from(extra.contains("kept")));
            assert_eq!(chat.forgetting.0.is_some(), extra.contains("forgetting"), "held only when there is some: {extra}");
            assert_eq!(chat.queued.0.is_some(), extra.contains("queued"), "held only when there is some: {extra}");
        }
        let mut chat = ChatRecord::new_chat("ahp-chat:/x".to_owned(), "c".to_owned(), crate::time::WallTime(0));
        assert!(chat.written.is_empty() && chat.kept.is_empty());
        assert_eq!(chat, ChatRecord { written: Rare(Some(Box::default())), ..chat.clone() }, "an empty list held equals none");
        chat.written.insert("/w/a".to_owned());
        assert!(chat.written.contains("/w/a"));
        assert!(serde_json::to_string(&chat).expect("encodes").contains(r#""written":["/w/a"]"#));
    }

    /// A record whose key and default chat follow from its URI holds
    /// neither, one stored with others holds them, and both are written
    /// back byte for byte, compact and pretty; records compare by what
    /// they read as, held or not.
    #[test]
    fn a_records_key_and_default_chat_are_derived_and_written_back_byte_for_byte() {
        for (key, chat, derived) in [
            ("ahp-session@k-1", "ahp-chat:/ahp-session@k-1", (true, true)),
            ("ahp-session@other", "ahp-chat:/ahp-session@k-1", (false, true)),
            ("ahp-session@k-1", "ahp-chat:/c", (true, false)),
            ("x", "ahp-chat:/ahp-session@k-12", (false, false)),
        ] {
            let text = format!(
                r#"{{"format":1,"key":"{key}","resource":"ahp-session:/k-1","provider":"echo","title":"","createdAt":"2026-12-03T18:31:39.123Z","modifiedAt":"2026-12-03T18:31:40.000Z","isRead":false,"isArchived":false,"workingDirectories":[],"config":{{}},"owner":null,"scope":null,"defaultChat":"{chat}","chats":[{{"resource":"{chat}","title":"","conversationId":"c","modifiedAt":"2026-12-03T18:31:40.000Z","status":1,"fresh":false,"senders":{{}}}}],"changes":null,"git":null,"external":false}}"#
            );
            let record: SessionRecord = serde_json::from_str(&text).expect("the record parses");
            assert_eq!((!record.key.is_held(), !record.default_chat.is_held()), derived, "{key} {chat}");
            assert_eq!((record.key().as_ref(), record.default_chat().as_ref()), (key, chat));
            assert!(record.is_default_chat(chat) && !record.is_default_chat("ahp-chat:/ahp-session@k-"));
            assert_eq!(serde_json::to_string(&record).expect("encodes"), text, "compact");
            let pretty = serde_json::to_string_pretty(&serde_json::from_str::<serde_json::Value>(&text).expect("json")).expect("pretty");
            assert_eq!(serde_json::to_string_pretty(&record).expect("encodes"), pretty, "pretty");
            let held = SessionRecord { key: Derived::held(key), default_chat: Derived::held(chat), ..record.clone() };
            assert_eq!(held, record, "held or derived, the same record");
            let mut compacted = held.clone();
            compacted.compact();
            assert_eq!((!compacted.key.is_held(), !compacted.default_chat.is_held()), derived);
        }
        let made = SessionRecord::new_session(
            &crate::ids::ResourceId::parse("ahp-session:/n").expect("id"),
            "echo".into(),
            Vec::new(),
            serde_json::Map::new(),
            Default::default(),
            None,
            None,
            None,
            crate::time::WallTime(0),
        );
        assert!(!made.key.is_held() && !made.default_chat.is_held());
        assert_eq!((made.key().as_ref(), made.default_chat().as_ref()), ("ahp-session@n", "ahp-chat:/ahp-session@n"));
        assert_eq!(made.chats[0].resource, "ahp-chat:/ahp-session@n");
    }

    /// Settings read the same whether held or not; a write allocates them,
    /// and equal maps compare equal however they are held.
    #[test]
    fn settings_read_as_the_map_held_or_not() {
        let mut none = Settings::default();
        assert!(none.is_empty());
        assert_eq!(none, Settings::from(serde_json::Map::new()));
        none.insert("a".to_owned(), serde_json::json!(1));
        assert_eq!(none.get("a"), Some(&serde_json::json!(1)));
        let mut map = serde_json::Map::new();
        map.insert("a".to_owned(), serde_json::json!(1));
        assert_eq!(none, Settings::from(map));
        assert_eq!(serde_json::to_string(&none).expect("encodes"), r#"{"a":1}"#);
    }
}
