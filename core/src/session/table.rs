//! The host's sessions, by URI, each also reachable by a slot number that
//! does not change while the session is in the table.
//!
//! A map of URI to slot gives the URI order every walk over the sessions
//! uses (fixed iteration order, as the core requires); the sessions
//! themselves sit in a slab, so the catalogue's index can keep a row's slot
//! beside its key and a `listSessions` page reads its rows without
//! searching the map (Sessions page, "Finding one"; issue 4's benchmark:
//! a search compares URIs that share a long prefix, ~0.3 µs a row at 100k).

use std::borrow::Borrow;
use std::collections::BTreeMap;

use ahp_types::Uri;

use super::Session;

/// A session's place in the [`SessionTable`]'s slab: stable from insert to
/// remove, then free for the next session inserted. Whoever keeps one
/// beside a URI reads it back with [`SessionTable::at`], which checks the
/// URI, so a stale slot can never read another session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slot(u32);

/// The sessions by URI (ordered) and by slot (O(1)). The map-like methods
/// mirror `BTreeMap<Uri, Session>`'s, and iterate in URI order.
#[derive(Debug, Clone, Default)]
pub struct SessionTable {
    keys: BTreeMap<Uri, Slot>,
    slab: Vec<Option<(Uri, Session)>>,
    free: Vec<Slot>,
    /// What changed since [`SessionTable::clear_touched`]: the slots handed
    /// out to change (each once), and the URIs removed.
    touched: Touched,
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

    /// An empty table with room for `n` sessions, so a table built from
    /// the store at start holds no spare slots (each is a session's size).
    pub fn with_capacity(n: usize) -> SessionTable {
        SessionTable { slab: Vec::with_capacity(n), ..SessionTable::default() }
    }

    /// How many sessions.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Adds or replaces the session at `uri` and returns its slot; a
    /// replaced session's slot is kept.
    pub fn insert(&mut self, uri: Uri, session: Session) -> Slot {
        if let Some(&slot) = self.keys.get(&uri) {
            self.touch(slot);
            if let Some(entry) = self.slab.get_mut(slot.0 as usize) {
                *entry = Some((uri, session));
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
            *entry = Some((uri.clone(), session));
        }
        self.keys.insert(uri, slot);
        self.touch(slot);
        slot
    }

    /// Takes the session at `uri` out; its slot becomes free.
    pub fn remove<Q: Ord + ?Sized>(&mut self, uri: &Q) -> Option<Session>
    where
        Uri: Borrow<Q>,
    {
        let slot = self.keys.remove(uri)?;
        let taken = self.slab.get_mut(slot.0 as usize)?.take();
        self.free.push(slot);
        taken.map(|(uri, s)| {
            self.touched.removed.push(uri);
            s
        })
    }

    /// The slot of the session at `uri`.
    pub fn slot<Q: Ord + ?Sized>(&self, uri: &Q) -> Option<Slot>
    where
        Uri: Borrow<Q>,
    {
        self.keys.get(uri).copied()
    }

    /// The session in `slot`, if it is the one at `uri` (a slot freed and
    /// taken by another session reads as none).
    pub fn at(&self, slot: Slot, uri: &Uri) -> Option<&Session> {
        match self.slab.get(slot.0 as usize) {
            Some(Some((u, s))) if u == uri => Some(s),
            _ => None,
        }
    }

    /// The session at `uri`.
    pub fn get<Q: Ord + ?Sized>(&self, uri: &Q) -> Option<&Session>
    where
        Uri: Borrow<Q>,
    {
        let slot = self.keys.get(uri)?;
        self.slab.get(slot.0 as usize)?.as_ref().map(|(_, s)| s)
    }

    /// The session at `uri`, to change.
    pub fn get_mut<Q: Ord + ?Sized>(&mut self, uri: &Q) -> Option<&mut Session>
    where
        Uri: Borrow<Q>,
    {
        let slot = *self.keys.get(uri)?;
        self.touch(slot);
        self.slab.get_mut(slot.0 as usize)?.as_mut().map(|(_, s)| s)
    }

    /// The URI as the table holds it and the session.
    pub fn get_key_value<Q: Ord + ?Sized>(&self, uri: &Q) -> Option<(&Uri, &Session)>
    where
        Uri: Borrow<Q>,
    {
        let slot = self.keys.get(uri)?;
        self.slab.get(slot.0 as usize)?.as_ref().map(|(u, s)| (u, s))
    }

    /// Whether a session is at `uri`.
    pub fn contains_key<Q: Ord + ?Sized>(&self, uri: &Q) -> bool
    where
        Uri: Borrow<Q>,
    {
        self.keys.contains_key(uri)
    }

    /// Every session with its URI, in URI order.
    pub fn iter(&self) -> impl Iterator<Item = (&Uri, &Session)> + '_ {
        self.keys.values().filter_map(|slot| self.slab.get(slot.0 as usize)?.as_ref().map(|(u, s)| (u, s)))
    }

    /// Every session, in URI order.
    pub fn values(&self) -> impl Iterator<Item = &Session> + '_ {
        self.iter().map(|(_, s)| s)
    }

    /// Every session, to change, in slot order (for changes that do not
    /// depend on order).
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut Session> + '_ {
        self.touched.all = true;
        self.slab.iter_mut().filter_map(|e| e.as_mut().map(|(_, s)| s))
    }

    /// Notes that the session in `slot` may change.
    fn touch(&mut self, slot: Slot) {
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
            .filter_map(|slot| self.slab.get(slot.0 as usize)?.as_ref().map(|(u, _)| u))
            .chain(self.touched.removed.iter())
            .collect();
        uris.sort();
        uris.dedup();
        Some(uris)
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
    use crate::ids::ResourceId;
    use crate::record::{SessionRecord, RECORD_FORMAT};
    use crate::session::Phase;
    use crate::time::MonoTime;

    fn session(key: &str) -> Session {
        let record = SessionRecord {
            format: RECORD_FORMAT,
            key: format!("ahp-session@{key}"),
            resource: format!("ahp-session:/{key}"),
            provider: "echo".into(),
            title: key.into(),
            created_at: "2026-01-01T00:00:00.000Z".into(),
            modified_at: "2026-01-01T00:00:00.000Z".into(),
            is_read: false,
            is_archived: false,
            working_directories: Vec::new(),
            config: Default::default(),
            owner: None,
            scope: None,
            default_chat: format!("ahp-chat:/{key}"),
            chats: Vec::new(),
            changes: None,
            git: None,
            external: false,
            offer: None,
            in_tree: None,
            shared_trees: Vec::new(),
            deleted: false,
        };
        let id = ResourceId::parse(&record.resource).expect("valid id");
        Session::new(id, record, Phase::Asleep, None, true, MonoTime(0))
    }

    #[test]
    fn iterates_in_uri_order_and_reuses_freed_slots_without_aliasing() {
        let mut t = SessionTable::new();
        for k in ["c", "a", "b"] {
            t.insert(format!("ahpd://echo/{k}"), session(k));
        }
        let order: Vec<&Uri> = t.iter().map(|(u, _)| u).collect();
        assert_eq!(order, ["ahpd://echo/a", "ahpd://echo/b", "ahpd://echo/c"]);
        let a: Uri = "ahpd://echo/a".into();
        let slot_a = t.slot(&a).expect("a has a slot");
        assert!(t.at(slot_a, &a).is_some());
        assert!(t.remove(&a).is_some());
        assert!(t.at(slot_a, &a).is_none(), "a removed session's slot reads as none");
        let d: Uri = "ahpd://echo/d".into();
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
            t.insert(format!("ahpd://echo/{k}"), session(k));
        }
        t.clear_touched();
        assert_eq!(t.touched(), Some(Vec::new()), "nothing since the clear");
        let (a, b, d): (Uri, Uri, Uri) = ("ahpd://echo/a".into(), "ahpd://echo/b".into(), "ahpd://echo/d".into());
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
}
