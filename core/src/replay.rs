//! The replay buffer: the last envelopes broadcast, kept for `reconnect`
//! (AHP: a client that reconnects with a `lastSeenServerSeq` still covered
//! is sent the envelopes it missed instead of snapshots).
//!
//! Kept encoded, not as envelopes: an envelope's tree of JSON values (a
//! `session/metaChanged` carries the whole `_meta`, one map per key) took
//! several times its text in memory, and the buffer holds a thousand of
//! them whatever is live (issue 21: memory per live session with 100 peers
//! in one folder). A reconnect, rare beside the broadcasts, decodes what it
//! replays.

use std::collections::VecDeque;
use std::sync::Arc;

use ahp_types::actions::ActionEnvelope;
use ahp_types::Uri;

/// One kept envelope: what a replay filters on, and the envelope's text.
#[derive(Debug, Clone, PartialEq)]
struct Kept {
    /// The envelope's `serverSeq`.
    server_seq: u64,
    /// The envelope's channel.
    channel: Uri,
    /// The envelope as JSON (`ActionEnvelope` encoded), the same text its
    /// frames were made of (`crate::effect::Broadcast`).
    json: Arc<str>,
}

/// The last `len` envelopes broadcast, oldest first (see the module docs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplayBuffer {
    kept: VecDeque<Kept>,
}

/// A kept envelope that no longer decodes (it never should: it was encoded
/// from the same type); the caller answers with snapshots instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undecodable {
    /// The envelope's `serverSeq`.
    pub server_seq: u64,
    /// What the decoder said.
    pub error: String,
}

impl ReplayBuffer {
    /// Keeps the envelope numbered `server_seq` on `channel`, as its JSON
    /// text `json` (`crate::effect::Broadcast::json`), dropping the oldest
    /// beyond `len` envelopes (`Config::replay_buffer_len`). An envelope
    /// that could not be encoded (`None`: every map key is a string, so
    /// never in practice) ends the replay window there: everything kept
    /// before it is dropped, so a replay can never skip it silently.
    pub fn push(&mut self, server_seq: u64, channel: &Uri, json: Option<&Arc<str>>, len: usize) {
        match json {
            Some(json) => self.kept.push_back(Kept { server_seq, channel: channel.clone(), json: Arc::clone(json) }),
            None => self.kept.clear(),
        }
        while self.kept.len() > len {
            self.kept.pop_front();
        }
    }

    /// The `serverSeq` of the oldest envelope kept, if any.
    pub fn oldest(&self) -> Option<u64> {
        self.kept.front().map(|k| k.server_seq)
    }

    /// The kept envelopes after `last_seen` on any of `channels`, oldest
    /// first, decoded.
    ///
    /// # Errors
    /// [`Undecodable`] for the first one that does not decode.
    pub fn since(&self, last_seen: u64, channels: &[Uri]) -> Result<Vec<ActionEnvelope>, Undecodable> {
        self.kept
            .iter()
            .filter(|k| k.server_seq > last_seen && channels.contains(&k.channel))
            .map(|k| serde_json::from_str(&k.json).map_err(|e| Undecodable { server_seq: k.server_seq, error: e.to_string() }))
            .collect()
    }

    /// What [`crate::invariants::inv_replay_buffer_window`] checks: at most
    /// `len` kept, in rising `serverSeq` order, none after `server_seq` (the
    /// last stamped), so a replay sends what was missed in the order it was
    /// sent and nothing from the future.
    ///
    /// # Errors
    /// Which of these does not hold.
    pub fn check(&self, len: usize, server_seq: u64) -> Result<(), String> {
        if self.kept.len() > len {
            return Err(format!("{} envelopes kept, at most {len} allowed", self.kept.len()));
        }
        let mut last = None;
        for k in &self.kept {
            if last.is_some_and(|l| k.server_seq <= l) {
                return Err(format!("envelope {} kept after {}", k.server_seq, last.unwrap_or_default()));
            }
            if k.server_seq > server_seq {
                return Err(format!("envelope {} kept, but the last serverSeq stamped is {server_seq}", k.server_seq));
            }
            last = Some(k.server_seq);
        }
        Ok(())
    }

    /// How many envelopes are kept.
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::actions::{SessionMetaChangedAction, SessionTitleChangedAction, StateAction};

    fn envelope(seq: u64, channel: &str, action: StateAction) -> ActionEnvelope {
        ActionEnvelope { channel: channel.to_owned(), action, server_seq: seq, origin: None, rejection_reason: None }
    }

    /// Keeps `envelope` as the host does: encoded once, as broadcast.
    fn push(buffer: &mut ReplayBuffer, envelope: &ActionEnvelope, len: usize) {
        let sent = crate::effect::Broadcast::new(envelope.clone());
        buffer.push(sent.server_seq, &sent.channel, sent.json(), len);
    }

    fn title(seq: u64, channel: &str) -> ActionEnvelope {
        envelope(seq, channel, StateAction::SessionTitleChanged(SessionTitleChangedAction { title: format!("t{seq}") }))
    }

    #[test]
    fn a_replay_gives_back_the_envelopes_after_the_last_seen_on_the_asked_channels() {
        let mut buffer = ReplayBuffer::default();
        for seq in 1..=5 {
            push(&mut buffer, &title(seq, if seq % 2 == 0 { "ahp-session:/b" } else { "ahp-session:/a" }), 10);
        }
        let got = buffer.since(1, &["ahp-session:/a".to_owned()]).unwrap();
        assert_eq!(got, vec![title(3, "ahp-session:/a"), title(5, "ahp-session:/a")]);
        assert_eq!(buffer.oldest(), Some(1));
    }

    #[test]
    fn the_buffer_keeps_only_the_last_len_envelopes() {
        let mut buffer = ReplayBuffer::default();
        for seq in 1..=5 {
            push(&mut buffer, &title(seq, "ahp-session:/a"), 3);
        }
        assert_eq!(buffer.len(), 3);
        assert_eq!(buffer.oldest(), Some(3));
        assert_eq!(buffer.since(0, &["ahp-session:/a".to_owned()]).unwrap().len(), 3);
    }

    #[test]
    fn a_meta_change_comes_back_exactly_as_it_was_broadcast() {
        let mut meta = serde_json::Map::new();
        meta.insert("ahpd.peers".to_owned(), serde_json::json!({"count": 3}));
        meta.insert("ahpd.awareness".to_owned(), serde_json::json!({"tier": "warn", "error": null, "ratio": 0.25}));
        let sent = envelope(7, "ahp-session:/a", StateAction::SessionMetaChanged(SessionMetaChangedAction { meta: Some(meta) }));
        let mut buffer = ReplayBuffer::default();
        push(&mut buffer, &sent, 10);
        assert_eq!(buffer.since(6, &["ahp-session:/a".to_owned()]).unwrap(), vec![sent]);
    }
}
