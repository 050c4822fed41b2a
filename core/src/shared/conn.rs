//! One client connection as the host sees it ([`Conn`]), a handshake held
//! for the wakes of the sessions it names ([`Handshake`]), and which
//! sessions some connection watches ([`Watched`]): what [`Shared`]'s
//! connections are (`Shared::conns`). What the host does with them
//! (admission, frame credit, the connection-level commands, disconnects)
//! is `host/connections.rs`.
//!
//! [`Shared`]: super::Shared

use std::collections::{BTreeMap, BTreeSet};

use ahp_types::Uri;

use crate::effect::ConnId;
use crate::protocol::codec;
use crate::record::SessionRecord;
use crate::time::MonoTime;

/// One client connection as the host sees it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Conn {
    /// The client's id from `initialize` or `reconnect`.
    pub client_id: Option<String>,
    /// Whether `initialize` (or `reconnect`) succeeded.
    pub initialized: bool,
    /// The channels it is subscribed to.
    pub subscriptions: BTreeSet<Uri>,
    /// Who it authenticated as, on a host with a users directory.
    pub principal: Option<crate::grants::Principal>,
    /// Frame credit left (token bucket), in thousandths of a frame.
    pub credit_milli: u64,
    /// When the credit was last topped up.
    pub credit_at: MonoTime,
    /// Frames refused over the rate since the last `limit.rate` line.
    pub rate_refused: u64,
    /// When the last `limit.rate` line about it was logged.
    pub rate_logged_at: Option<MonoTime>,
    /// Since when it has kept exceeding its rate: the first refusal of the
    /// current run (a run ends after a second with no refusal).
    pub rate_over_since: Option<MonoTime>,
    /// Its last refused frame.
    pub rate_last_refused: MonoTime,
    /// Whether it was closed for exceeding its rate; its frames are dropped
    /// until the shell reports it gone.
    pub rate_closed: bool,
    /// An `initialize` or `reconnect` held until the sessions it names are
    /// woken (`host/connections.rs`); at most one per connection.
    pub handshake: Option<Handshake>,
}

/// A handshake (`initialize` or `reconnect`) waiting for the wakes of the
/// sessions it names whose state is not held, so that its reply carries a
/// snapshot of each (Sessions page, "Sleep and wake": a session after a
/// restart is a row until something needs it).
#[derive(Debug, Clone, PartialEq)]
pub struct Handshake {
    /// The request id.
    pub id: u64,
    /// The `initialize` or `reconnect`, decoded and checked when it came;
    /// it runs on from there when the last wake ends.
    pub request: crate::continuation::HandshakeReq,
    /// Every session it named (by the session or one of its chats):
    /// watched until the reply, so no sleep or eviction takes one it has
    /// just woken, or one it found held, while others wake.
    pub sessions: BTreeSet<Uri>,
    /// Those whose wake has not ended yet.
    pub waiting: BTreeSet<Uri>,
    /// When it is answered with what is held, wakes ended or not (ten
    /// seconds after it came, `host/connections.rs`).
    pub until: MonoTime,
    /// The connection's frames that came while it waited, decoded, in
    /// order, each with its text's length in bytes: run once it is
    /// answered, as if the wakes had been instant.
    pub queued: Vec<(codec::Decoded, usize)>,
}

impl Conn {
    /// Whether this connection watches `session`: it is subscribed to the
    /// session or to one of its chats, or holds a handshake waiting for it
    /// (Sessions page, "Sleep and wake": none goes while a client watches
    /// it, and a watched session does not sleep).
    pub fn watches(&self, session: &SessionRecord) -> bool {
        self.subscriptions.contains(&session.resource)
            || session.chats.iter().any(|chat| self.subscriptions.contains(&chat.resource))
            || self.handshake.as_ref().is_some_and(|h| h.sessions.contains(&session.resource))
    }
}

/// Which sessions some connection watches, for a walk over many sessions
/// (the idle sleeps, the residency limit, the next deadline): every
/// connection's subscriptions and held handshakes gathered once, on first
/// need, so each session is one lookup instead of a question to every
/// connection (issue 21: per-input work must not grow with sessions ×
/// clients). Says what [`Conn::watches`] says of some connection.
pub(crate) struct Watched<'a> {
    conns: &'a BTreeMap<ConnId, Conn>,
    /// Channels subscribed to, and sessions a held handshake names.
    sets: std::cell::OnceCell<(BTreeSet<&'a str>, BTreeSet<&'a str>)>,
}

impl<'a> Watched<'a> {
    /// Over `conns`; nothing is gathered until asked.
    pub(crate) fn new(conns: &'a BTreeMap<ConnId, Conn>) -> Watched<'a> {
        Watched { conns, sets: std::cell::OnceCell::new() }
    }

    /// Whether some connection watches `session`.
    pub(crate) fn session(&self, session: &SessionRecord) -> bool {
        let (subscribed, named) = self.sets.get_or_init(|| {
            let mut subscribed = BTreeSet::new();
            let mut named = BTreeSet::new();
            for c in self.conns.values() {
                subscribed.extend(c.subscriptions.iter().map(String::as_str));
                if let Some(h) = &c.handshake {
                    named.extend(h.sessions.iter().map(String::as_str));
                }
            }
            (subscribed, named)
        });
        subscribed.contains(session.resource.as_str())
            || session.chats.iter().any(|chat| subscribed.contains(chat.resource.as_str()))
            || named.contains(session.resource.as_str())
    }
}
