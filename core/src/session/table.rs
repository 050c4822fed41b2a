//! The host's sessions, by URI, each also reachable by a slot number that
//! does not change while the session is in the table.
//!
//! A map of URI to slot gives the URI order every walk over the sessions
//! uses (fixed iteration order, as the core requires); the sessions
//! themselves sit in a slab, so the catalogue's index can keep a row's slot
//! beside its key and a `listSessions` page reads its rows without
//! searching the map (Sessions page, "Finding one"; issue 4's benchmark:
//! a search compares URIs that share a long prefix, ~0.3 µs a row at 100k).
//!
//! The table also keeps the index a pass over a backend's transcripts looks
//! each row up in: which sessions hold a chat with a given provider's
//! conversation id ([`SessionTable::conversation_holder`]). It is kept here
//! because every change to a session goes through the table's `&mut`
//! methods, so the table knows which sessions to index again without every
//! rule that touches a chat having to remember to (issue 21: the merge of a
//! 100k-row pass must not build a 100k-entry map per slice).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use ahp_types::Uri;

use super::Session;

pub use crate::ids::SharedUri;

/// A session's place in the [`SessionTable`]'s slab: stable from insert to
/// remove, then free for the next session inserted. Whoever keeps one
/// beside a URI reads it back with [`SessionTable::at`], which checks the
/// URI, so a stale slot can never read another session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slot(u32);

/// Where a session sits in the [`SessionTable`]: what the catalogue's index
/// keeps beside its row ([`crate::catalogue::Index::insert`]), handed to a
/// session's own rules with the session so it can announce itself.
#[derive(Debug, Clone)]
pub struct Place {
    /// Its slot in the slab.
    pub slot: Slot,
    /// Its URI as the table's indexes share it.
    pub uri: SharedUri,
}

/// The sessions by URI (ordered) and by slot (O(1)). The map-like methods
/// mirror `BTreeMap<Uri, Session>`'s, and iterate in URI order.
#[derive(Debug, Clone, Default)]
pub struct SessionTable {
    /// URI order; each key the one [`SharedUri`] the indexes share.
    keys: BTreeMap<SharedUri, Slot>,
    /// The sessions by slot. A session's URI is its `record.resource` (the
    /// key it is inserted under, which never changes): not kept again
    /// beside it (issue 21: ~70 bytes a catalogue row).
    slab: Vec<Option<Session>>,
    free: Vec<Slot>,
    /// What changed since [`SessionTable::clear_touched`]: the slots handed
    /// out to change (each once), and the URIs removed.
    touched: Touched,
    /// Which sessions hold which conversations.
    conversations: Conversations,
    /// The working-directory lists the sessions share, each once (a
    /// catalogue's rows list a few folders: [`crate::record::Folders`]).
    folders: crate::record::FolderPool,
}

/// The sessions holding each conversation, by a hash of the provider and
/// the conversation id (FNV-1a, fixed: the same on every run). A hash, not
/// the strings, to keep the index small at 100k rows (docs/PERFORMANCE.md);
/// two conversations that share a hash share a key, and
/// [`SessionTable::conversation_holder`] compares the strings.
#[derive(Debug, Clone, Default)]
struct Conversations {
    /// (key, slot of a session holding it), each pair once: one set, not a
    /// list per key, so a session's entry costs no allocation of its own
    /// (issue 21: ~130 bytes a catalogue row with a `Vec` per key and per
    /// slot, ~40 now).
    by_key: BTreeSet<(u64, Slot)>,
    /// Per slot, the keys it is indexed under (ascending, each once).
    of_slot: Vec<SlotKeys>,
    /// Slots that may have changed since the last
    /// [`SessionTable::sync_conversations`], each once.
    dirty: Vec<Slot>,
    /// Per slot, whether it is in `dirty`.
    marked: Vec<bool>,
    /// `values_mut` handed out every session: every slot is dirty.
    all: bool,
}

/// The keys one slot is indexed under, ascending, each once: held inline
/// for none or one (a session with one chat, or chats of one
/// conversation), in a slice for more.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
enum SlotKeys {
    /// Indexed under none.
    #[default]
    None,
    /// Indexed under one key.
    One(u64),
    /// Indexed under these, ascending.
    Many(Box<[u64]>),
}

impl SlotKeys {
    /// The keys `keys` (ascending, each once) as held.
    fn of(keys: Vec<u64>) -> SlotKeys {
        match keys.as_slice() {
            [] => SlotKeys::None,
            [one] => SlotKeys::One(*one),
            _ => SlotKeys::Many(keys.into_boxed_slice()),
        }
    }

    /// The keys, ascending.
    fn as_slice(&self) -> &[u64] {
        match self {
            SlotKeys::None => &[],
            SlotKeys::One(key) => std::slice::from_ref(key),
            SlotKeys::Many(keys) => keys,
        }
    }
}

/// The index key of `provider`'s conversation `id` (also what a merge
/// notes the conversations it saw by: a number, not a copy of the id).
pub(crate) fn conversation_key(provider: &str, id: &str) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    // 0xff never occurs in UTF-8, so ("ab", "c") and ("a", "bc") differ.
    for b in provider.bytes().chain(std::iter::once(0xff)).chain(id.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(PRIME);
    }
    h
}

/// The keys `session` is indexed under: one per conversation of its chats,
/// ascending, each once.
fn keys_of(session: &Session) -> Vec<u64> {
    let mut keys: Vec<u64> = session.record.chats.iter().map(|c| conversation_key(&session.record.provider, &c.conversation_id)).collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// The sessions a table handed out to change, or added or removed, since it
/// was last cleared (the host clears it at the start of every input). It
/// over-approximates: a session handed out to change may have been left as
/// it was. A checker that re-checks only these sessions relies on every
/// change going through the table's `&mut` methods, which is the only way
/// to reach a session to change it.
#[derive(Debug, Clone, Default)]
struct Touched {
    /// Per slot, whether it is in `slots`.
    marked: Vec<bool>,
    slots: Vec<Slot>,
    removed: Vec<Uri>,
    /// `values_mut` handed out every session.
    all: bool,
}

impl SessionTable {
    /// An empty table.
    pub fn new() -> SessionTable {
        SessionTable::default()
    }

    /// Makes room in the slab for `n` more sessions, so a table built from
    /// the store at start holds no spare slots (each is a session's size).
    pub fn reserve(&mut self, n: usize) {
        self.slab.reserve_exact(n);
    }

    /// How many sessions.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Adds or replaces the session at `uri` (its `record.resource`) and
    /// returns its slot; a replaced session's slot is kept.
    pub fn insert(&mut self, uri: Uri, mut session: Session) -> Slot {
        session.record.working_directories.intern(&mut self.folders);
        if let Some(&slot) = self.keys.get(uri.as_str()) {
            self.touch(slot);
            if let Some(entry) = self.slab.get_mut(slot.0 as usize) {
                if let Some(old) = entry.replace(session) {
                    old.record.working_directories.release(&mut self.folders);
                }
            }
            return slot;
        }
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                self.slab.push(None);
                Slot((self.slab.len() - 1) as u32)
            }
        };
        if let Some(entry) = self.slab.get_mut(slot.0 as usize) {
            *entry = Some(session);
        }
        self.keys.insert(SharedUri::from(uri), slot);
        self.touch(slot);
        slot
    }

    /// Rebuilds the URI order and the conversation index from their sorted
    /// entries, so their B-tree nodes are full (inserted one at a time,
    /// nodes split half full: ~43 bytes an entry of the URI order, ~23
    /// rebuilt). Same entries, same order; for after a restore.
    pub fn repack(&mut self) {
        self.keys = std::mem::take(&mut self.keys).into_iter().collect();
        self.conversations.by_key = std::mem::take(&mut self.conversations.by_key).into_iter().collect();
    }

    /// The URI of the session at `uri` as the table holds it, to share
    /// (a copy of the handle, not of the text): what the catalogue's order
    /// and the chat → session map keep.
    pub fn shared_uri(&self, uri: &str) -> Option<SharedUri> {
        self.keys.get_key_value(uri).map(|(u, _)| u.clone())
    }

    /// Takes the session at `uri` out; its slot becomes free.
    pub fn remove(&mut self, uri: &str) -> Option<Session> {
        let (uri, slot) = self.keys.remove_entry(uri)?;
        let taken = self.slab.get_mut(slot.0 as usize)?.take();
        self.free.push(slot);
        self.conversations.mark(slot);
        taken.map(|mut s| {
            s.record.working_directories.release(&mut self.folders);
            self.touched.removed.push(uri.to_string());
            // Handed out whole, to change or put back.
            s.unsettle();
            s
        })
    }

    /// The slot of the session at `uri`.
    pub fn slot(&self, uri: &str) -> Option<Slot> {
        self.keys.get(uri).copied()
    }

    /// The session in `slot`, if it is the one at `uri` (a slot freed and
    /// taken by another session reads as none).
    pub fn at(&self, slot: Slot, uri: &str) -> Option<&Session> {
        match self.slab.get(slot.0 as usize) {
            Some(Some(s)) if s.record.resource == uri => Some(s),
            _ => None,
        }
    }

    /// The session at `uri`.
    pub fn get(&self, uri: &str) -> Option<&Session> {
        let slot = self.keys.get(uri)?;
        self.slab.get(slot.0 as usize)?.as_ref()
    }

    /// The session at `uri`, to change.
    pub fn get_mut(&mut self, uri: &str) -> Option<&mut Session> {
        let slot = *self.keys.get(uri)?;
        self.touch(slot);
        let session = self.slab.get_mut(slot.0 as usize)?.as_mut()?;
        // Before any change: the row root subscribers hold is the one it
        // builds now (`Announcement::Settled`).
        session.unsettle();
        Some(session)
    }

    /// The session at `uri`, to change, with its [`Place`] (as
    /// [`SessionTable::get_mut`]).
    pub fn get_mut_placed(&mut self, uri: &str) -> Option<(&mut Session, Place)> {
        let (key, slot) = self.keys.get_key_value(uri)?;
        let place = Place { slot: *slot, uri: key.clone() };
        self.touch(place.slot);
        let session = self.slab.get_mut(place.slot.0 as usize)?.as_mut()?;
        session.unsettle();
        Some((session, place))
    }

    /// The session's URI (its `record.resource`) and the session.
    pub fn get_key_value(&self, uri: &str) -> Option<(&Uri, &Session)> {
        let slot = self.keys.get(uri)?;
        self.slab.get(slot.0 as usize)?.as_ref().map(|s| (&s.record.resource, s))
    }

    /// Whether a session is at `uri`.
    pub fn contains_key(&self, uri: &str) -> bool {
        self.keys.contains_key(uri)
    }

    /// Every session with its URI (its `record.resource`), in URI order.
    pub fn iter(&self) -> impl Iterator<Item = (&Uri, &Session)> + '_ {
        self.keys.values().filter_map(|slot| self.slab.get(slot.0 as usize)?.as_ref().map(|s| (&s.record.resource, s)))
    }

    /// Every session, in URI order.
    pub fn values(&self) -> impl Iterator<Item = &Session> + '_ {
        self.iter().map(|(_, s)| s)
    }

    /// Every session, to change, in slot order (for changes that do not
    /// depend on order).
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut Session> + '_ {
        self.touched.all = true;
        self.conversations.all = true;
        self.slab.iter_mut().filter_map(|e| {
            let s = e.as_mut()?;
            s.unsettle();
            Some(s)
        })
    }

    /// Settles every session handed out to change, added or replaced since
    /// [`SessionTable::clear_touched`] ([`Session::settle`]): the host calls
    /// it as each input ends, so a catalogue row that is not resident and
    /// unchanged keeps no copy of the row root subscribers hold. Not a
    /// change: what is touched stays as it was.
    pub fn settle_touched(&mut self) {
        if self.touched.all {
            for s in self.slab.iter_mut().flatten() {
                s.settle();
            }
            return;
        }
        for slot in &self.touched.slots {
            if let Some(Some(s)) = self.slab.get_mut(slot.0 as usize) {
                s.settle();
            }
        }
    }

    /// Notes that the session in `slot` may change.
    fn touch(&mut self, slot: Slot) {
        self.conversations.mark(slot);
        let i = slot.0 as usize;
        if self.touched.marked.len() <= i {
            self.touched.marked.resize(i + 1, false);
        }
        if !self.touched.marked[i] {
            self.touched.marked[i] = true;
            self.touched.slots.push(slot);
        }
    }

    /// Forgets what was touched (the host calls it as each input begins).
    pub fn clear_touched(&mut self) {
        for slot in self.touched.slots.drain(..) {
            if let Some(m) = self.touched.marked.get_mut(slot.0 as usize) {
                *m = false;
            }
        }
        self.touched.removed.clear();
        self.touched.all = false;
    }

    /// The URIs of the sessions that may have changed, been added or been
    /// removed since [`SessionTable::clear_touched`], in URI order, each
    /// once; `None` when every session may have changed. For checkers that
    /// re-check only what an input touched (docs/SIMULATION.md).
    pub fn touched(&self) -> Option<Vec<&Uri>> {
        if self.touched.all {
            return None;
        }
        let mut uris: Vec<&Uri> = self
            .touched
            .slots
            .iter()
            .filter_map(|slot| self.slab.get(slot.0 as usize)?.as_ref().map(|s| &s.record.resource))
            .chain(self.touched.removed.iter())
            .collect();
        uris.sort();
        uris.dedup();
        Some(uris)
    }
}

impl SessionTable {
    /// The sessions after `after` in URI order (all of them for `None`):
    /// for walks spread over several inputs, which pick up where they left
    /// off whatever was added or removed meanwhile.
    pub fn iter_after<'a>(&'a self, after: Option<&str>) -> impl Iterator<Item = (&'a Uri, &'a Session)> + 'a {
        let lower = match after {
            Some(uri) => Bound::Excluded(uri),
            None => Bound::Unbounded,
        };
        self.keys.range::<str, _>((lower, Bound::Unbounded)).filter_map(|(_, slot)| self.slab.get(slot.0 as usize)?.as_ref().map(|s| (&s.record.resource, s)))
    }

    /// The session that holds `provider`'s conversation `id` in one of its
    /// chats (the last in URI order if several do), indexing again first
    /// whatever changed since the index was last brought up to date.
    pub fn conversation_holder(&mut self, provider: &str, id: &str) -> Option<(&Uri, &Session)> {
        self.sync_conversations();
        let key = conversation_key(provider, id);
        self.conversations
            .by_key
            .range((key, Slot(0))..=(key, Slot(u32::MAX)))
            .filter_map(|(_, slot)| self.slab.get(slot.0 as usize)?.as_ref())
            .filter(|s| s.record.provider == provider && s.record.chats.iter().any(|c| &*c.conversation_id == id))
            .max_by(|a, b| a.record.resource.cmp(&b.record.resource))
            .map(|s| (&s.record.resource, s))
    }

    /// Indexes again every session that may have changed since the last
    /// call (the host calls it at the end of every input, so the index a
    /// checker reads is up to date): O(sessions changed), or every session
    /// after `values_mut`.
    pub fn sync_conversations(&mut self) {
        let dirty: Vec<Slot> = if self.conversations.all {
            self.conversations.all = false;
            for slot in self.conversations.dirty.drain(..) {
                self.conversations.marked[slot.0 as usize] = false;
            }
            (0..self.slab.len().max(self.conversations.of_slot.len())).map(|i| Slot(i as u32)).collect()
        } else {
            let dirty = std::mem::take(&mut self.conversations.dirty);
            for slot in &dirty {
                self.conversations.marked[slot.0 as usize] = false;
            }
            dirty
        };
        for slot in dirty {
            let i = slot.0 as usize;
            let keys = match self.slab.get(i) {
                Some(Some(s)) => keys_of(s),
                _ => Vec::new(),
            };
            let index = &mut self.conversations;
            if index.of_slot.len() <= i {
                if keys.is_empty() {
                    continue;
                }
                index.of_slot.resize(i + 1, SlotKeys::None);
            }
            if index.of_slot[i].as_slice() == keys.as_slice() {
                continue;
            }
            for key in index.of_slot[i].as_slice() {
                index.by_key.remove(&(*key, slot));
            }
            for key in &keys {
                index.by_key.insert((*key, slot));
            }
            index.of_slot[i] = SlotKeys::of(keys);
        }
    }

    /// Whether the conversation index is up to date and indexes exactly
    /// the conversations of every session's chats, computed afresh (for
    /// `invariants::inv_conversation_index_consistent`).
    pub fn check_conversations(&self) -> Result<(), String> {
        let index = &self.conversations;
        if index.all || !index.dirty.is_empty() {
            return Err(format!("{} sessions changed since the index was last brought up to date", if index.all { self.len() } else { index.dirty.len() }));
        }
        let mut entries = 0;
        for (i, entry) in self.slab.iter().enumerate() {
            let want = match entry {
                Some(s) => keys_of(s),
                None => Vec::new(),
            };
            let have: &[u64] = index.of_slot.get(i).map_or(&[], SlotKeys::as_slice);
            let name = entry.as_ref().map_or("a free slot", |s| s.record.resource.as_str());
            if have != want.as_slice() {
                return Err(format!("{name} is indexed under {have:?}, its chats' conversations are {want:?}"));
            }
            for key in &want {
                if !index.by_key.contains(&(*key, Slot(i as u32))) {
                    return Err(format!("{name}'s conversation {key:#x} does not lead to it"));
                }
            }
            entries += want.len();
        }
        if index.of_slot.iter().skip(self.slab.len()).any(|keys| !keys.as_slice().is_empty()) {
            return Err("a slot past the table's end is indexed".to_owned());
        }
        let listed = index.by_key.len();
        if listed != entries {
            return Err(format!("{listed} entries indexed, {entries} conversations held"));
        }
        Ok(())
    }
}

impl Conversations {
    /// Notes that the session in `slot` may have changed.
    fn mark(&mut self, slot: Slot) {
        let i = slot.0 as usize;
        if self.marked.len() <= i {
            self.marked.resize(i + 1, false);
        }
        if !self.marked[i] {
            self.marked[i] = true;
            self.dirty.push(slot);
        }
    }
}

impl<'a> IntoIterator for &'a SessionTable {
    type Item = (&'a Uri, &'a Session);
    type IntoIter = Box<dyn Iterator<Item = (&'a Uri, &'a Session)> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{SessionRecord, RECORD_FORMAT};
    use crate::session::Phase;
    use crate::time::MonoTime;

    fn session(key: &str) -> Session {
        let record = SessionRecord {
            format: RECORD_FORMAT,
            key: crate::record::Derived::held(format!("ahp-session@{key}")),
            resource: format!("ahp-session:/{key}"),
            provider: "echo".into(),
            title: key.into(),
            created_at: "2026-01-01T00:00:00.000Z".into(),
            modified_at: "2026-01-01T00:00:00.000Z".into(),
            is_read: false,
            is_archived: false,
            working_directories: Default::default(),
            config: Default::default(),
            owner: None,
            scope: None,
            default_chat: crate::record::Derived::held(format!("ahp-chat:/{key}")),
            chats: Vec::new(),
            changes: None,
            git: None,
            external: false,
            offer: None,
            in_tree: None,
            shared_trees: Default::default(),
            deleted: false,
            tools: None,
        };
        Session::new(record, Phase::Asleep, None, true, MonoTime(0))
    }

    #[test]
    fn iterates_in_uri_order_and_reuses_freed_slots_without_aliasing() {
        let mut t = SessionTable::new();
        for k in ["c", "a", "b"] {
            t.insert(format!("ahp-session:/{k}"), session(k));
        }
        let order: Vec<&Uri> = t.iter().map(|(u, _)| u).collect();
        assert_eq!(order, ["ahp-session:/a", "ahp-session:/b", "ahp-session:/c"]);
        let a: Uri = "ahp-session:/a".into();
        let slot_a = t.slot(&a).expect("a has a slot");
        assert!(t.at(slot_a, &a).is_some());
        assert!(t.remove(&a).is_some());
        assert!(t.at(slot_a, &a).is_none(), "a removed session's slot reads as none");
        let d: Uri = "ahp-session:/d".into();
        t.insert(d.clone(), session("d"));
        assert_eq!(t.slot(&d), Some(slot_a), "the freed slot is taken again");
        assert!(t.at(slot_a, &a).is_none(), "the old URI never reads the new session");
        assert_eq!(t.len(), 3);
        // Replacing keeps the slot.
        t.insert(d.clone(), session("d2"));
        assert_eq!(t.slot(&d), Some(slot_a));
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn touched_names_what_was_handed_out_added_or_removed_since_cleared() {
        let mut t = SessionTable::new();
        for k in ["a", "b", "c"] {
            t.insert(format!("ahp-session:/{k}"), session(k));
        }
        t.clear_touched();
        assert_eq!(t.touched(), Some(Vec::new()), "nothing since the clear");
        let (a, b, d): (Uri, Uri, Uri) = ("ahp-session:/a".into(), "ahp-session:/b".into(), "ahp-session:/d".into());
        let _ = t.get(&a);
        assert_eq!(t.touched(), Some(Vec::new()), "a read touches nothing");
        let _ = t.get_mut(&b);
        let _ = t.get_mut(&b);
        t.remove(&a);
        t.insert(d.clone(), session("d"));
        assert_eq!(t.touched(), Some(vec![&a, &b, &d]), "each once, in URI order, the removed one included");
        let _ = t.values_mut().count();
        assert_eq!(t.touched(), None, "values_mut hands out every session");
        t.clear_touched();
        assert_eq!(t.touched(), Some(Vec::new()));
    }

    fn chat(key: &str, conversation: &str) -> crate::record::ChatRecord {
        crate::record::ChatRecord::new_chat(format!("ahp-chat:/{key}"), conversation.to_owned(), crate::time::WallTime(0))
    }

    #[test]
    fn the_conversation_index_follows_every_change_through_the_table() {
        let mut t = SessionTable::new();
        let (a, b): (Uri, Uri) = ("ahp-session:/a".into(), "ahp-session:/b".into());
        let mut sa = session("a");
        sa.record.chats.push(chat("a", "conv-1"));
        t.insert(a.clone(), sa);
        t.insert(b.clone(), session("b"));
        assert_eq!(t.conversation_holder("echo", "conv-1").map(|(u, _)| u.clone()), Some(a.clone()));
        assert_eq!(t.conversation_holder("claude", "conv-1").map(|(u, _)| u.clone()), None, "another provider's conversation");
        assert!(t.check_conversations().is_ok());
        // A chat added, a conversation renamed (an agent assigned its id).
        t.get_mut(&b).expect("b").record.chats.push(chat("b", "conv-1"));
        assert_eq!(t.conversation_holder("echo", "conv-1").map(|(u, _)| u.clone()), Some(b.clone()), "the last in URI order of those holding it");
        t.get_mut(&a).expect("a").record.chats[0].conversation_id = "conv-2".into();
        t.sync_conversations();
        assert!(t.check_conversations().is_ok());
        assert_eq!(t.conversation_holder("echo", "conv-2").map(|(u, _)| u.clone()), Some(a.clone()));
        // Removed: its slot taken by another session.
        t.remove(&b);
        assert_eq!(t.conversation_holder("echo", "conv-1").map(|(u, _)| u.clone()), None);
        t.insert("ahp-session:/c".into(), session("c"));
        t.sync_conversations();
        assert!(t.check_conversations().is_ok());
        // Changed without a sync: the check says so.
        t.get_mut(&a).expect("a").record.chats.clear();
        assert!(t.check_conversations().is_err(), "a change not yet indexed");
        let _ = t.values_mut().count();
        t.sync_conversations();
        assert!(t.check_conversations().is_ok());
        assert_eq!(t.conversation_holder("echo", "conv-2").map(|(u, _)| u.clone()), None);
    }

    #[test]
    fn iter_after_walks_in_uri_order_from_where_it_stopped() {
        let mut t = SessionTable::new();
        for k in ["a", "c"] {
            t.insert(format!("ahp-session:/{k}"), session(k));
        }
        let first = t.iter_after(None).next().map(|(u, _)| u.clone());
        assert_eq!(first.as_deref(), Some("ahp-session:/a"));
        t.insert("ahp-session:/b".into(), session("b"));
        let a: Uri = "ahp-session:/a".into();
        let rest: Vec<&str> = t.iter_after(Some(&a)).map(|(u, _)| u.as_str()).collect();
        assert_eq!(rest, ["ahp-session:/b", "ahp-session:/c"], "one added past the walk's place is met");
        t.remove("ahp-session:/b");
        assert_eq!(t.iter_after(Some(&"ahp-session:/b".to_owned())).next().map(|(u, _)| u.as_str()), Some("ahp-session:/c"), "from a place that went");
        assert!(t.iter_after(Some(&"ahp-session:/c".to_owned())).next().is_none());
    }
}
