//! A handshake that names sessions whose state is not held. `initialize`
//! (its `initialSubscriptions`) and `reconnect` (its `subscriptions`) answer
//! with a snapshot of each channel they name, as a `subscribe` does; a
//! session after a restart or an eviction is only a row until it is woken,
//! so the reply is held until every such session has woken or failed to,
//! then the request runs again and answers with what is held (Sessions
//! page, "Sleep and wake"; reference-server.md 2.14: "with them, snapshots
//! for each requested session and chat").
//!
//! The sessions a held handshake woke are watched by its connection until
//! the reply ([`crate::host::Conn::watches`]), so neither sleep nor the
//! residency limit takes one before the client is subscribed to it.

use std::collections::BTreeSet;

use ahp_types::{Uri, ROOT_RESOURCE_URI};
use serde_json::Value;

use super::{Handshake, Host};
use crate::effect::ConnId;
use crate::grants::Operation;
use crate::session::{Phase, Waiter};

impl Host {
    /// The grant a read of `channel` needs: the root is the session list,
    /// a session its state, anything else a chat's turns.
    pub(crate) fn read_operation(&self, channel: &str) -> Operation {
        if channel == ROOT_RESOURCE_URI {
            Operation::SessionList
        } else if self.sessions.contains_key(channel) {
            Operation::SessionState
        } else {
            Operation::ChatTurns
        }
    }

    /// Whether `conn` may be sent `channel`'s snapshot and envelopes (always
    /// on a host with no users directory).
    pub(crate) fn may_read(&self, conn: ConnId, channel: &str) -> bool {
        self.authorize(conn, self.read_operation(channel)).is_ok()
    }

    /// Holds handshake `id` of `conn` (`method` with its `params` as they
    /// came) until the sessions among `channels` whose state is not held
    /// have woken; starts their wakes. Returns false, holding nothing, when
    /// every named session is held, when the connection already holds a
    /// handshake or as many waiting requests as it may: the caller answers
    /// at once with what is held.
    pub(crate) fn hold_for_wakes(&mut self, conn: ConnId, id: u64, method: &str, params: Value, channels: &[Uri]) -> bool {
        let sleepers: BTreeSet<Uri> = channels
            .iter()
            .filter(|channel| channel.as_str() != ROOT_RESOURCE_URI)
            .filter_map(|channel| self.session_of(channel))
            .filter(|uri| {
                self.sessions
                    .get(uri)
                    .is_some_and(|s| s.resident.is_none() && matches!(s.phase, Phase::Asleep | Phase::Waking))
            })
            .collect();
        if sleepers.is_empty() || self.conns.get(&conn).is_none_or(|c| c.handshake.is_some()) {
            return false;
        }
        if self.waiting_full(conn).is_some() {
            return false;
        }
        if let Some(c) = self.conns.get_mut(&conn) {
            c.handshake = Some(Handshake {
                id,
                method: method.to_owned(),
                params,
                sessions: sleepers.clone(),
                waiting: sleepers.clone(),
            });
        }
        for uri in &sleepers {
            self.touch(uri);
            if let Some(s) = self.sessions.get_mut(uri) {
                s.waiters.push(Waiter::Handshake { conn, id });
            }
        }
        // A wake refused at once (a folder no longer trusted) settles its
        // part before the next starts; the last to settle answers.
        for uri in &sleepers {
            self.wake(uri);
        }
        true
    }

    /// The wake of `session` that handshake `id` of `conn` waited for has
    /// ended, woken or not. When it was the last, the handshake runs again
    /// and answers with the snapshots of what is held now.
    pub(crate) fn handshake_settled(&mut self, conn: ConnId, id: u64, session: &Uri) {
        let Some(c) = self.conns.get_mut(&conn) else { return };
        let Some(held) = c.handshake.as_mut().filter(|h| h.id == id) else { return };
        held.waiting.remove(session);
        if !held.waiting.is_empty() {
            return;
        }
        let Some(held) = c.handshake.take() else { return };
        match held.method.as_str() {
            "reconnect" => self.reconnect(conn, id, held.params, false),
            _ => self.initialize(conn, id, held.params, false),
        }
        self.check_residency();
    }
}
