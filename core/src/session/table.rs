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
use std::collections::{BTreeMap, BTreeSet};

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
///
/// The table also notes which sessions were touched (handed out to change,
/// inserted or removed) since [`SessionTable::take_touched`] was last
/// called: every change to a session goes through `&mut` access here, so
/// the host's per-input awareness reconciliation (issue 21) looks at those
/// sessions only instead of walking every session after every input.
#[derive(Debug, Clone, Default)]
pub struct SessionTable {
    keys: BTreeMap<Uri, Slot>,
    slab: Vec<Option<(Uri, Session)>>,
    free: Vec<Slot>,
    /// Slots touched since the last take, each once (`marked` says which).
    touched: Vec<Slot>,
    /// Per slab entry: whether its slot is in `touched`.
    marked: Vec<bool>,
    /// Sessions removed since the last take (their slot may be reused).
    removed: Vec<Uri>,
    /// Every session was handed out to change ([`SessionTable::values_mut`]).
    all_touched: bool,
}

/// What [`SessionTable::take_touched`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Touched {
    /// Any session may have changed.
    All,
    /// Only these may have changed (or been removed), in URI order.
    Some(BTreeSet<Uri>),
}

impl SessionTable {
    /// An empty table.
    pub fn new() -> SessionTable {
        SessionTable::default()
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
            if let Some(entry) = self.slab.get_mut(slot.0 as usize) {
                *entry = Some((uri, session));
            }
            self.mark(slot);
            return slot;
        }
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                self.slab.push(None);
                self.marked.push(false);
                Slot((self.slab.len() - 1) as u32)
            }
        };
        if let Some(entry) = self.slab.get_mut(slot.0 as usize) {
            *entry = Some((uri.clone(), session));
        }
        self.keys.insert(uri, slot);
        self.mark(slot);
        slot
    }

    /// Notes `slot` as touched (once until the next take).
    fn mark(&mut self, slot: Slot) {
        if let Some(marked) = self.marked.get_mut(slot.0 as usize) {
            if !*marked {
                *marked = true;
                self.touched.push(slot);
            }
        }
    }

    /// The sessions touched (handed out to change by
    /// [`SessionTable::get_mut`] or [`SessionTable::values_mut`], inserted,
    /// replaced or removed) since the last call, and forgets them. A
    /// session not reported is exactly as it was at the last call.
    pub fn take_touched(&mut self) -> Touched {
        if self.all_touched {
            self.forget_touched();
            return Touched::All;
        }
        let mut uris = BTreeSet::new();
        for slot in std::mem::take(&mut self.touched) {
            if let Some(marked) = self.marked.get_mut(slot.0 as usize) {
                *marked = false;
            }
            if let Some(Some((uri, _))) = self.slab.get(slot.0 as usize) {
                uris.insert(uri.clone());
            }
        }
        uris.extend(self.removed.drain(..));
        Touched::Some(uris)
    }

    /// Forgets what was touched, reporting nothing (for a caller that has
    /// no use for it this time, at no cost per session).
    pub fn forget_touched(&mut self) {
        for slot in std::mem::take(&mut self.touched) {
            if let Some(marked) = self.marked.get_mut(slot.0 as usize) {
                *marked = false;
            }
        }
        self.removed.clear();
        self.all_touched = false;
    }

    /// Takes the session at `uri` out; its slot becomes free.
    pub fn remove<Q: Ord + ?Sized>(&mut self, uri: &Q) -> Option<Session>
    where
        Uri: Borrow<Q>,
    {
        let slot = self.keys.remove(uri)?;
        let taken = self.slab.get_mut(slot.0 as usize)?.take();
        self.free.push(slot);
        taken.map(|(u, s)| {
            self.removed.push(u);
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

    /// The session at `uri`, to change (noted as touched).
    pub fn get_mut<Q: Ord + ?Sized>(&mut self, uri: &Q) -> Option<&mut Session>
    where
        Uri: Borrow<Q>,
    {
        let slot = *self.keys.get(uri)?;
        self.mark(slot);
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
    /// depend on order); all are noted as touched.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut Session> + '_ {
        self.all_touched = true;
        self.slab.iter_mut().filter_map(|e| e.as_mut().map(|(_, s)| s))
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
    fn reports_the_sessions_touched_since_the_last_take() {
        let mut t = SessionTable::new();
        let uri = |k: &str| -> Uri { format!("ahpd://echo/{k}") };
        for k in ["c", "a", "b"] {
            t.insert(uri(k), session(k));
        }
        let all: BTreeSet<Uri> = ["a", "b", "c"].iter().map(|k| uri(k)).collect();
        assert_eq!(t.take_touched(), Touched::Some(all), "inserts are touches");
        assert_eq!(t.take_touched(), Touched::Some(BTreeSet::new()), "a take forgets");
        let _ = t.get(&uri("a"));
        let _ = t.get_mut(&uri("b"));
        let _ = t.get_mut(&uri("b"));
        assert_eq!(t.take_touched(), Touched::Some([uri("b")].into()), "reads are not touches; each touch is reported once");
        // A removed session is reported even when its slot is taken again.
        assert!(t.remove(&uri("c")).is_some());
        t.insert(uri("d"), session("d"));
        assert_eq!(t.take_touched(), Touched::Some([uri("c"), uri("d")].into()));
        for _ in t.values_mut() {}
        let _ = t.get_mut(&uri("a"));
        assert_eq!(t.take_touched(), Touched::All);
        assert_eq!(t.take_touched(), Touched::Some(BTreeSet::new()));
        let _ = t.get_mut(&uri("a"));
        t.forget_touched();
        assert_eq!(t.take_touched(), Touched::Some(BTreeSet::new()));
    }
}
