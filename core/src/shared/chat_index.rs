//! The host's chat → session map, without an entry of its own for a
//! default chat whose URI names its session.
//!
//! A session's default chat is `ahp-chat:/<store key>`, and the store key is
//! `<scheme>@<id>` of the session URI `<scheme>:/<id>`
//! (`ids::ResourceId::default_chat_uri`), so for almost every chat of a
//! catalogue row the session follows from the chat URI itself. Such a pair
//! is kept as the session URI alone (the session table's shared handle,
//! with no copy of the chat URI's text); every other pair (a chat a client
//! added, a default chat some other way named) as a map entry. Reads,
//! writes and the count behave exactly as a `BTreeMap<Uri, SharedUri>`'s
//! (issue 21: the map's entry for each default chat was ~105 bytes of a
//! catalogue row; docs/PERFORMANCE.md).

use std::collections::{BTreeMap, BTreeSet};

use ahp_types::Uri;

use crate::ids::SharedUri;

/// The scheme every default chat URI has (`ahp-chat:/<store key>`).
const DEFAULT_CHAT_PREFIX: &str = "ahp-chat:/";

/// Chat URI → the URI of the session holding it (see the module's doc).
#[derive(Debug, Clone, Default)]
pub struct ChatIndex {
    /// The pairs whose session is not the one the chat URI names.
    listed: BTreeMap<Uri, SharedUri>,
    /// The sessions whose default-chat URI (`named_session`'s inverse) is
    /// indexed to them.
    named: BTreeSet<SharedUri>,
}

/// The session URI `chat` names, if it has a default chat's form
/// (`ahp-chat:/<scheme>@<id>`, the session `<scheme>:/<id>`) and that
/// session's default-chat URI is `chat` again: only then is the pair kept
/// without the chat's text, so two chat URIs never name one session.
fn named_session(chat: &str) -> Option<String> {
    let key = chat.strip_prefix(DEFAULT_CHAT_PREFIX)?;
    let (scheme, id) = key.split_once('@')?;
    if scheme.contains(":/") {
        // `<scheme>:/<id>` would split at this `:/` first: not the
        // session whose default chat `chat` is.
        return None;
    }
    Some(format!("{scheme}:/{id}"))
}

impl ChatIndex {
    /// An empty index.
    pub fn new() -> ChatIndex {
        ChatIndex::default()
    }

    /// Rebuilds both maps from their sorted entries, so their B-tree nodes
    /// are full (see `SessionTable::repack`). Same pairs.
    pub fn repack(&mut self) {
        self.listed = std::mem::take(&mut self.listed).into_iter().collect();
        self.named = std::mem::take(&mut self.named).into_iter().collect();
    }

    /// The session holding `chat`, as the index keeps its URI.
    pub fn get(&self, chat: &str) -> Option<&SharedUri> {
        if let Some(session) = self.listed.get(chat) {
            return Some(session);
        }
        let named = named_session(chat)?;
        self.named.get(named.as_str())
    }

    /// Whether `chat` is indexed.
    pub fn contains_key(&self, chat: &str) -> bool {
        self.get(chat).is_some()
    }

    /// Indexes `chat` to `session`, replacing whatever it was indexed to;
    /// returns that session, as a map's `insert` does.
    pub fn insert(&mut self, chat: Uri, session: SharedUri) -> Option<SharedUri> {
        let before = self.remove(&chat);
        if named_session(&chat).as_deref() == Some(&*session) {
            self.named.insert(session);
        } else {
            self.listed.insert(chat, session);
        }
        before
    }

    /// Takes `chat` out of the index; returns the session it was indexed
    /// to.
    pub fn remove(&mut self, chat: &str) -> Option<SharedUri> {
        if let Some(session) = self.listed.remove(chat) {
            return Some(session);
        }
        let named = named_session(chat)?;
        self.named.take(named.as_str())
    }

    /// How many chats are indexed.
    pub fn len(&self) -> usize {
        self.listed.len() + self.named.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The index answers every read as a plain map given the same writes
    /// would: default-chat URIs, chat URIs of that form indexed to another
    /// session, look-alikes that name no session, replaced and removed
    /// pairs.
    #[test]
    fn reads_as_a_map_given_the_same_writes() {
        let chats = [
            "ahp-chat:/ahp-session@a",
            "ahp-chat:/ahp-session@b",
            "ahp-chat:/claude@x.1",
            "ahp-chat:/a@b:/c",
            "ahp-chat:/a:/b@c",
            "ahp-chat:/noat",
            "ahp-chat:/ahp-session@a@b",
            "urn:chat:1",
            "",
        ];
        let sessions = ["ahp-session:/a", "ahp-session:/b", "claude:/x.1", "a:/b:/c", "ahp-session:/a@b", "other:/z"];
        let mut index = ChatIndex::new();
        let mut model: BTreeMap<Uri, SharedUri> = BTreeMap::new();
        // A fixed walk over every (chat, session) pair, inserting and
        // removing in an order that revisits each chat several times.
        let mut step = 0usize;
        for round in 0..5 {
            for (i, chat) in chats.iter().enumerate() {
                for (j, session) in sessions.iter().enumerate() {
                    step += 1;
                    if (i + j + round) % 3 == 0 {
                        assert_eq!(index.remove(chat), model.remove(*chat), "remove {chat} at step {step}");
                    } else if (i * 7 + j * 3 + round) % 4 != 0 {
                        let shared = SharedUri::from(*session);
                        assert_eq!(index.insert((*chat).to_owned(), shared.clone()), model.insert((*chat).to_owned(), shared), "insert {chat} → {session} at step {step}");
                    }
                    for c in chats {
                        assert_eq!(index.get(c), model.get(c), "get {c} at step {step}");
                        assert_eq!(index.contains_key(c), model.contains_key(c));
                    }
                    assert_eq!(index.len(), model.len(), "len at step {step}");
                }
            }
        }
    }

    /// A session's own default chat costs no copy of the chat URI; a
    /// look-alike that is not its session's default chat is listed.
    #[test]
    fn a_default_chat_is_kept_as_its_session_alone() {
        let mut index = ChatIndex::new();
        index.insert("ahp-chat:/ahp-session@a".to_owned(), "ahp-session:/a".into());
        index.insert("ahp-chat:/ahp-session@b".to_owned(), "ahp-session:/a".into());
        index.insert("ahp-chat:/a:/b@c".to_owned(), "a:/b:/c".into());
        assert_eq!(index.named.len(), 1);
        assert_eq!(index.listed.len(), 2);
        assert_eq!(index.get("ahp-chat:/a@b:/c"), None, "another URI naming the same session is not indexed");
        assert_eq!(index.get("ahp-chat:/a:/b@c").map(|u| &**u), Some("a:/b:/c"));
    }
}
