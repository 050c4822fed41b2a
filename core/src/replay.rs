//! The replay buffer: the last envelopes broadcast, kept for `reconnect`
//! (AHP: a client that reconnects with a `lastSeenServerSeq` still covered
//! is sent the envelopes it missed instead of snapshots).
//!
//! Kept as the broadcasts themselves (`crate::effect::Broadcast`, the
//! same shared value every subscriber's writer was handed: keeping adds no
//! copy), and, once a writer has encoded one, as its frame text alone: an
//! envelope's tree of values (a `session/metaChanged` carries the whole
//! `_meta`) took several times its text in memory, and the buffer holds a
//! thousand (issue 21: memory per live session with 100 peers in one
//! folder). Each counts its weight (its JSON text's length, weighed when it
//! was made) against the byte bound, whichever form it is in: the core
//! never encodes an envelope (issue 25: encoding a 900 KB message stalled
//! every client). A reconnect, rare beside the broadcasts, clones or
//! decodes what it replays; both give the envelope broadcast.
//!
//! Bounded twice ([`Window`]): by envelopes (`Config::replay_buffer_len`)
//! and by bytes (`Limits::replay_buffer_max_bytes`). By count alone a
//! client's big messages were held whatever their size (issue 25: 1,000
//! envelopes of 900 KB turns, ~300 MB, kept with every session disposed).
//! A disposed session's envelopes are forgotten at once ([`ReplayBuffer::forget`]):
//! no reconnect can be replayed onto a retired channel.

use std::collections::VecDeque;
use std::sync::Arc;

use ahp_types::actions::ActionEnvelope;
use ahp_types::Uri;

use crate::effect::Broadcast;

/// One kept envelope: the broadcast, or (once encoded) its frame.
#[derive(Debug, Clone, PartialEq)]
pub enum Kept {
    /// The broadcast as it was sent.
    Sent(Arc<Broadcast>),
    /// Its frame text, with what a replay filters on.
    Text {
        /// The envelope's `serverSeq`.
        server_seq: u64,
        /// The envelope's channel.
        channel: Uri,
        /// The envelope's weight ([`Broadcast::weight`]), in bytes.
        weight: usize,
        /// The `action` frame ([`Broadcast::frame`]).
        frame: Arc<str>,
    },
}

impl Kept {
    fn server_seq(&self) -> u64 {
        match self {
            Kept::Sent(b) => b.server_seq,
            Kept::Text { server_seq, .. } => *server_seq,
        }
    }
    fn channel(&self) -> &Uri {
        match self {
            Kept::Sent(b) => &b.channel,
            Kept::Text { channel, .. } => channel,
        }
    }
    /// What it counts against [`Window::max_bytes`]: its weight and its
    /// channel, in bytes (the same in either form).
    fn bytes(&self) -> usize {
        match self {
            Kept::Sent(b) => b.weight() + b.channel.len(),
            Kept::Text { weight, channel, .. } => weight + channel.len(),
        }
    }
    /// The envelope again; `None` for a frame that does not decode (it was
    /// encoded from the same type: never in practice).
    fn envelope(&self) -> Option<ActionEnvelope> {
        #[derive(serde::Deserialize)]
        struct Frame {
            params: ActionEnvelope,
        }
        match self {
            Kept::Sent(b) => Some(b.envelope().clone()),
            Kept::Text { frame, .. } => serde_json::from_str::<Frame>(frame).ok().map(|f| f.params),
        }
    }
    /// The text form, when a writer has encoded the broadcast.
    fn compacted(&self) -> Option<Kept> {
        let Kept::Sent(b) = self else { return None };
        let frame = b.encoded()?;
        Some(Kept::Text { server_seq: b.server_seq, channel: b.channel.clone(), weight: b.weight(), frame: Arc::clone(frame) })
    }
}

/// How many of the newest kept envelopes each push looks at to keep the
/// encoded ones as text only (writers encode an envelope right after it is
/// broadcast; one no subscriber was sent stays a value, within the bounds).
const COMPACT_LOOKBACK: usize = 32;

/// How much the buffer may keep: whichever bound is reached first drops
/// the oldest envelopes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Most envelopes kept (`Config::replay_buffer_len`).
    pub len: usize,
    /// Most bytes kept, counting each envelope's weight (its JSON text's
    /// length, `crate::json_size`) and its channel URI
    /// (`Limits::replay_buffer_max_bytes`), in bytes.
    pub max_bytes: usize,
}

impl Window {
    /// The window `config` sets.
    pub fn of(config: &crate::Config) -> Window {
        Window { len: config.replay_buffer_len, max_bytes: config.limits.replay_buffer_max_bytes }
    }
}

/// The last envelopes broadcast within a [`Window`], oldest first (see the
/// module docs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplayBuffer {
    kept: VecDeque<Kept>,
    /// The sum of [`Kept::bytes`] over `kept`, in bytes.
    bytes: usize,
}

impl ReplayBuffer {
    /// Keeps `sent`, dropping the oldest beyond `window` (its envelopes or
    /// its bytes). An envelope that alone is bigger than `window.max_bytes`
    /// is not kept and ends the replay window there: everything kept
    /// before it is dropped, so a replay can never skip it silently (a
    /// reconnect from before it is answered with snapshots).
    pub fn push(&mut self, sent: &Arc<Broadcast>, window: Window) {
        self.compact();
        let kept = Kept::Sent(Arc::clone(sent));
        let size = kept.bytes();
        match size <= window.max_bytes {
            true => {
                self.bytes += size;
                self.kept.push_back(kept);
            }
            false => {
                crate::mark!("replay_window_ended");
                self.kept.clear();
                self.bytes = 0;
            }
        }
        while self.kept.len() > window.len || self.bytes > window.max_bytes {
            let Some(old) = self.kept.pop_front() else { break };
            self.bytes -= old.bytes();
        }
    }

    /// Keeps the newest envelopes a writer has encoded as their text alone
    /// (see the module docs); what they count and replay is unchanged.
    fn compact(&mut self) {
        for k in self.kept.iter_mut().rev().take(COMPACT_LOOKBACK) {
            if let Some(text) = k.compacted() {
                *k = text;
            }
        }
    }

    /// Forgets every kept envelope on one of `channels` (a disposed
    /// session's and its chats': a reconnect naming a retired channel is
    /// answered with snapshots, so they can never be replayed). Another
    /// channel's replay is unchanged: a reconnect from before the oldest
    /// envelope left is answered with snapshots, as always.
    /// Returns what was forgotten (for the caller to let go of off its
    /// thread: a client's big messages among them).
    pub fn forget(&mut self, channels: &[Uri]) -> Vec<Kept> {
        let (gone, kept): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut self.kept).into_iter().partition(|k| channels.contains(k.channel()));
        self.kept = kept;
        if !gone.is_empty() {
            self.bytes = self.kept.iter().map(Kept::bytes).sum();
        }
        gone.into()
    }

    /// The `serverSeq` of the oldest envelope kept, if any.
    pub fn oldest(&self) -> Option<u64> {
        self.kept.front().map(Kept::server_seq)
    }

    /// The kept envelopes after `last_seen` on any of `channels`, oldest
    /// first; `None` when one of them no longer decodes (never in practice:
    /// the caller answers with snapshots, which are always right).
    pub fn since(&self, last_seen: u64, channels: &[Uri]) -> Option<Vec<ActionEnvelope>> {
        self.kept.iter().filter(|k| k.server_seq() > last_seen && channels.contains(k.channel())).map(Kept::envelope).collect()
    }

    /// What [`crate::invariants::inv_replay_buffer_window`] checks: at most
    /// `window.len` envelopes and `window.max_bytes` bytes kept (the count
    /// of bytes true to what is kept), in rising `serverSeq` order, none
    /// after `server_seq` (the last stamped), so a replay sends what was
    /// missed in the order it was sent and nothing from the future.
    ///
    /// # Errors
    /// Which of these does not hold.
    pub fn check(&self, window: Window, server_seq: u64) -> Result<(), String> {
        if self.kept.len() > window.len {
            return Err(format!("{} envelopes kept, at most {} allowed", self.kept.len(), window.len));
        }
        let bytes: usize = self.kept.iter().map(Kept::bytes).sum();
        if bytes != self.bytes {
            return Err(format!("{bytes} bytes kept, but the buffer counts {}", self.bytes));
        }
        if bytes > window.max_bytes {
            return Err(format!("{bytes} bytes kept, at most {} allowed", window.max_bytes));
        }
        let mut last = None;
        for k in &self.kept {
            if last.is_some_and(|l| k.server_seq() <= l) {
                return Err(format!("envelope {} kept after {}", k.server_seq(), last.unwrap_or_default()));
            }
            if k.server_seq() > server_seq {
                return Err(format!("envelope {} kept, but the last serverSeq stamped is {server_seq}", k.server_seq()));
            }
            last = Some(k.server_seq());
        }
        Ok(())
    }

    /// How many envelopes are kept.
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    /// How many bytes are kept (each envelope's weight and channel), in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
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

    /// A window of `len` envelopes and no byte bound to speak of.
    const fn by_count(len: usize) -> Window {
        Window { len, max_bytes: usize::MAX }
    }

    /// Keeps `envelope` as the host does: the broadcast it was sent as.
    fn push(buffer: &mut ReplayBuffer, envelope: &ActionEnvelope, window: Window) {
        buffer.push(&Arc::new(Broadcast::new(envelope.clone())), window);
    }

    /// What `envelope` counts against the byte bound: its text (nothing in
    /// these to escape, so its weight is its length) and channel.
    fn size(envelope: &ActionEnvelope) -> usize {
        serde_json::to_string(envelope).unwrap().len() + envelope.channel.len()
    }

    /// A turn's start carrying a message of `text_bytes` bytes.
    fn big(seq: u64, channel: &str, text_bytes: usize) -> ActionEnvelope {
        envelope(seq, channel, StateAction::SessionTitleChanged(SessionTitleChangedAction { title: "x".repeat(text_bytes) }))
    }

    fn title(seq: u64, channel: &str) -> ActionEnvelope {
        envelope(seq, channel, StateAction::SessionTitleChanged(SessionTitleChangedAction { title: format!("t{seq}") }))
    }

    #[test]
    fn a_replay_gives_back_the_envelopes_after_the_last_seen_on_the_asked_channels() {
        let mut buffer = ReplayBuffer::default();
        for seq in 1..=5 {
            push(&mut buffer, &title(seq, if seq % 2 == 0 { "ahp-session:/b" } else { "ahp-session:/a" }), by_count(10));
        }
        let got = buffer.since(1, &["ahp-session:/a".to_owned()]).unwrap_or_default();
        assert_eq!(got, vec![title(3, "ahp-session:/a"), title(5, "ahp-session:/a")]);
        assert_eq!(buffer.oldest(), Some(1));
    }

    /// A broadcast a writer has encoded is kept as its text from the next
    /// push on: it counts the same bytes and replays the same envelope;
    /// one never encoded stays as it was sent.
    #[test]
    fn an_encoded_envelope_is_kept_as_its_text_and_replays_the_same() {
        let a = "ahp-session:/a";
        let mut meta = serde_json::Map::new();
        meta.insert("ahpd.peers".to_owned(), serde_json::json!({"count": 3, "list": ["x", "y"]}));
        let first = Arc::new(Broadcast::new(envelope(1, a, StateAction::SessionMetaChanged(SessionMetaChangedAction { meta: Some(meta) }))));
        let second = Arc::new(Broadcast::new(title(2, a)));
        let mut buffer = ReplayBuffer::default();
        buffer.push(&first, by_count(10));
        let _ = first.frame();
        buffer.push(&second, by_count(10));
        assert!(matches!(buffer.kept[0], Kept::Text { .. }), "the encoded one is text now");
        assert!(matches!(buffer.kept[1], Kept::Sent(_)), "the other was never encoded");
        assert_eq!(buffer.bytes(), size(first.envelope()) + size(second.envelope()));
        assert_eq!(buffer.since(0, &[a.to_owned()]), Some(vec![first.envelope().clone(), second.envelope().clone()]));
        assert_eq!(buffer.check(by_count(10), 2), Ok(()));
    }

    #[test]
    fn the_buffer_keeps_only_the_last_len_envelopes() {
        let mut buffer = ReplayBuffer::default();
        for seq in 1..=5 {
            push(&mut buffer, &title(seq, "ahp-session:/a"), by_count(3));
        }
        assert_eq!(buffer.len(), 3);
        assert_eq!(buffer.oldest(), Some(3));
        assert_eq!(buffer.since(0, &["ahp-session:/a".to_owned()]).unwrap_or_default().len(), 3);
    }

    #[test]
    fn a_meta_change_comes_back_exactly_as_it_was_broadcast() {
        let mut meta = serde_json::Map::new();
        meta.insert("ahpd.peers".to_owned(), serde_json::json!({"count": 3}));
        meta.insert("ahpd.awareness".to_owned(), serde_json::json!({"tier": "warn", "error": null, "ratio": 0.25}));
        let sent = envelope(7, "ahp-session:/a", StateAction::SessionMetaChanged(SessionMetaChangedAction { meta: Some(meta) }));
        let mut buffer = ReplayBuffer::default();
        push(&mut buffer, &sent, by_count(10));
        assert_eq!(buffer.since(6, &["ahp-session:/a".to_owned()]).unwrap_or_default(), vec![sent]);
    }

    #[test]
    fn the_buffer_keeps_at_most_its_bytes_dropping_the_oldest() {
        let a = "ahp-session:/a";
        let one = size(&big(1, a, 10_000));
        // Room for three such envelopes, not four; a thousand by count.
        let window = Window { len: 1000, max_bytes: 3 * one + one / 2 };
        let mut buffer = ReplayBuffer::default();
        for seq in 1..=10 {
            push(&mut buffer, &big(seq, a, 10_000), window);
            assert!(buffer.bytes() <= window.max_bytes, "{} bytes kept after {seq}", buffer.bytes());
            assert_eq!(buffer.check(window, seq), Ok(()));
        }
        assert_eq!(buffer.len(), 3);
        assert_eq!(buffer.bytes(), (8..=10).map(|seq| size(&big(seq, a, 10_000))).sum::<usize>());
        assert_eq!(buffer.oldest(), Some(8), "the newest three are kept");
        let replayed: Vec<u64> = buffer.since(0, &[a.to_owned()]).unwrap_or_default().iter().map(|e| e.server_seq).collect();
        assert_eq!(replayed, vec![8, 9, 10]);
    }

    #[test]
    fn small_envelopes_after_big_ones_push_the_big_ones_out_by_bytes_not_count() {
        let a = "ahp-session:/a";
        let window = Window { len: 1000, max_bytes: 64 << 10 };
        let mut buffer = ReplayBuffer::default();
        push(&mut buffer, &big(1, a, 40_000), window);
        push(&mut buffer, &big(2, a, 20_000), window);
        assert_eq!(buffer.len(), 2);
        // Small ones fill what is left, then push the big ones out.
        let mut seq = 2;
        while buffer.oldest() == Some(1) {
            seq += 1;
            push(&mut buffer, &title(seq, a), window);
        }
        assert!(buffer.bytes() <= window.max_bytes);
        assert_eq!(buffer.oldest(), Some(2), "the oldest went first, the rest stayed");
        assert_eq!(buffer.check(window, seq), Ok(()));
    }

    #[test]
    fn an_envelope_bigger_than_the_whole_bound_ends_the_window() {
        let a = "ahp-session:/a";
        let window = Window { len: 1000, max_bytes: 4096 };
        let mut buffer = ReplayBuffer::default();
        push(&mut buffer, &title(1, a), window);
        push(&mut buffer, &title(2, a), window);
        push(&mut buffer, &big(3, a, 10_000), window);
        assert!(buffer.is_empty(), "neither the big one nor what came before it is kept");
        assert_eq!(buffer.bytes(), 0);
        push(&mut buffer, &title(4, a), window);
        // A reconnect from before 3 finds the oldest kept after its next
        // one (the host answers it with snapshots); from 3 on it replays.
        assert_eq!(buffer.oldest(), Some(4));
        assert_eq!(buffer.since(3, &[a.to_owned()]).unwrap_or_default(), vec![title(4, a)]);
        assert_eq!(buffer.check(window, 4), Ok(()));
    }

    #[test]
    fn a_disposed_sessions_envelopes_are_forgotten_and_the_rest_kept() {
        let (a, b) = ("ahp-session:/a", "ahp-session:/b");
        let mut buffer = ReplayBuffer::default();
        for seq in 1..=6 {
            push(&mut buffer, &big(seq, if seq % 2 == 0 { b } else { a }, 1000), by_count(100));
        }
        buffer.forget(&[a.to_owned()]);
        assert_eq!(buffer.len(), 3);
        assert_eq!(buffer.bytes(), 3 * size(&big(2, b, 1000)));
        assert_eq!(buffer.since(0, &[a.to_owned(), b.to_owned()]).unwrap_or_default().iter().map(|e| e.server_seq).collect::<Vec<_>>(), vec![2, 4, 6]);
        assert_eq!(buffer.check(by_count(100), 6), Ok(()));
    }

    #[test]
    fn the_check_catches_a_buffer_over_its_bytes() {
        let a = "ahp-session:/a";
        let mut buffer = ReplayBuffer::default();
        for seq in 1..=3 {
            push(&mut buffer, &big(seq, a, 1000), by_count(10));
        }
        let tight = Window { len: 10, max_bytes: 2 * size(&big(1, a, 1000)) };
        assert!(buffer.check(tight, 3).is_err_and(|e| e.contains("bytes kept")));
    }
}
