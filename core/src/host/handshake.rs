//! A handshake that names sessions whose state is not held. `initialize`
//! (its `initialSubscriptions`) and `reconnect` (its `subscriptions`) answer
//! with a snapshot of each channel they name, as a `subscribe` does; a
//! session after a restart or an eviction is only a row until it is woken,
//! so the reply is held until every such session has woken or failed to,
//! then the request, decoded when it came, runs on and answers with what is
//! held (Sessions page, "Sleep and wake"; docs/REFERENCE-NOTES.md, 2.14:
//! "with them, snapshots for each requested session and chat").
//!
//! The sessions a held handshake names are watched by its connection until
//! the reply ([`crate::host::Conn::watches`]), so neither sleep nor the
//! residency limit takes one (woken for it or found held) before the client
//! is subscribed to it. The wait is bounded: after [`HANDSHAKE_WAIT_MS`] the
//! handshake is answered with what is held (a session still waking is left
//! out, and goes on waking), well inside a client's request timeout (the
//! `ahp` client's is 30 s, as long as an agent's start-up may take). The
//! connection's frames that come meanwhile wait behind it, decoded, in
//! order.

use std::collections::BTreeSet;

use ahp_types::{Uri, ROOT_RESOURCE_URI};

use super::{Handshake, Host};
use crate::continuation::HandshakeReq;
use crate::effect::{ConnId, LogLevel};
use crate::grants::Operation;
use crate::protocol::codec::{Decoded, Incoming};
use crate::protocol::error::{error, INVALID_PARAMS, INVALID_REQUEST};
use crate::session::{Phase, Waiter};

/// How long a handshake waits for the wakes of the sessions it names
/// before it is answered with what is held, in ms.
pub const HANDSHAKE_WAIT_MS: u64 = 10_000;

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
        self.shared.authorize(conn, self.read_operation(channel)).is_ok()
    }

    /// The -32602 refusal of a handshake naming `count` distinct channels
    /// when a connection may hold fewer subscriptions.
    pub(crate) fn too_many_named(&self, count: usize) -> Option<ahp_types::messages::JsonRpcError> {
        let max = self.shared.config.limits.subscriptions_per_conn;
        (count > max).then(|| {
            error(INVALID_PARAMS, format!("too many subscriptions named: a connection may hold {max} subscriptions"))
        })
    }

    /// Holds handshake `id` of `conn` (its decoded `request`) until the
    /// sessions among `channels` whose state is not held have woken; starts
    /// their wakes. Returns false, holding nothing, when every named session
    /// is held, when the connection already holds a handshake or as many
    /// waiting requests as it may: the caller answers at once with what is
    /// held.
    pub(crate) fn hold_for_wakes(&mut self, conn: ConnId, id: u64, request: HandshakeReq, channels: &[Uri]) -> bool {
        let named: BTreeSet<Uri> = channels
            .iter()
            .filter(|channel| channel.as_str() != ROOT_RESOURCE_URI)
            .filter_map(|channel| self.session_of(channel))
            .filter(|uri| self.sessions.contains_key(uri))
            .collect();
        let sleepers: BTreeSet<Uri> = named
            .iter()
            .filter(|uri| {
                self.sessions
                    .get(*uri)
                    .is_some_and(|s| s.resident.is_none() && matches!(s.phase, Phase::Asleep | Phase::Waking(_)))
            })
            .cloned()
            .collect();
        if sleepers.is_empty() || self.shared.conns.get(&conn).is_none_or(|c| c.handshake.is_some()) {
            return false;
        }
        if self.waiting_full(conn).is_some() {
            return false;
        }
        let until = self.shared.now.mono.plus_ms(HANDSHAKE_WAIT_MS);
        if let Some(c) = self.shared.conns.get_mut(&conn) {
            c.handshake = Some(Handshake {
                id,
                request,
                sessions: named,
                waiting: sleepers.clone(),
                until,
                queued: Vec::new(),
            });
        }
        for uri in &sleepers {
            self.touch(uri);
            if let Some(s) = self.sessions.get_mut(uri) {
                crate::mark!("handshake_waits_for_wake");
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
    /// ended, woken or not. When it was the last, the handshake runs on
    /// and answers with the snapshots of what is held now.
    pub(crate) fn handshake_settled(&mut self, conn: ConnId, id: u64, session: &Uri) {
        let Some(c) = self.shared.conns.get_mut(&conn) else { return };
        let Some(held) = c.handshake.as_mut().filter(|h| h.id == id && h.waiting.contains(session)) else { return };
        held.waiting.remove(session);
        if held.waiting.is_empty() {
            self.answer_handshake(conn);
        }
    }

    /// Answers every handshake whose wait is over with what is held now
    /// (called as time moves; [`HANDSHAKE_WAIT_MS`]).
    pub(crate) fn answer_overdue_handshakes(&mut self) {
        let now = self.shared.now.mono;
        let overdue: Vec<ConnId> =
            self.shared.conns.iter().filter(|(_, c)| c.handshake.as_ref().is_some_and(|h| h.until <= now)).map(|(id, _)| *id).collect();
        for conn in overdue {
            let waiting = self.shared.conns.get(&conn).and_then(|c| c.handshake.as_ref()).map(|h| h.waiting.len()).unwrap_or(0);
            crate::mark!("handshake_answered_early");
            self.shared.log(LogLevel::Info, "handshake.answered_early", None, format!(
                "connection {}: {waiting} session(s) still waking after {HANDSHAKE_WAIT_MS} ms are left out",
                conn.0
            ));
            self.answer_handshake(conn);
        }
    }

    /// Runs `conn`'s held handshake on from its decoded request, answering
    /// with what is held, then the frames that waited behind it, in order
    /// (a later one may hold a handshake again; the rest then wait behind
    /// that).
    fn answer_handshake(&mut self, conn: ConnId) {
        let Some(held) = self.shared.conns.get_mut(&conn).and_then(|c| c.handshake.take()) else { return };
        match held.request {
            HandshakeReq::Reconnect(request) => self.reconnect(conn, held.id, request, false),
            HandshakeReq::Initialize(request) => self.initialize(conn, held.id, request, false),
        }
        let mut queued = held.queued.into_iter();
        while let Some(frame) = queued.next() {
            if !self.shared.conns.contains_key(&conn) {
                return;
            }
            if let Some(next) = self.shared.conns.get_mut(&conn).and_then(|c| c.handshake.as_mut()) {
                next.queued.push(frame);
                next.queued.extend(queued);
                return;
            }
            self.run_frame(conn, frame);
        }
    }

    /// Keeps a decoded frame of `conn` that came while its handshake waits,
    /// to run after the answer. Hands the frame back when there is no
    /// handshake waiting. Past the connection's limit of waiting requests,
    /// a request is refused at once (-32600) and anything else dropped,
    /// with a warning.
    pub(crate) fn queue_behind_handshake(&mut self, conn: ConnId, frame: Decoded) -> Option<Decoded> {
        let max = self.shared.config.limits.pending_requests_per_conn;
        let Some(held) = self.shared.conns.get_mut(&conn).and_then(|c| c.handshake.as_mut()) else { return Some(frame) };
        if held.queued.len() < max {
            held.queued.push(frame);
            return None;
        }
        self.shared.log(LogLevel::Warn, "limit.pending_requests", None, format!(
            "connection {}: {max} frames already wait behind its handshake",
            conn.0
        ));
        if let Ok(Incoming::Request { id, .. }) = frame {
            let message = format!("too many requests waiting: {max} frames already wait behind this connection's handshake");
            self.shared.reply_error(conn, id, error(INVALID_REQUEST, message));
        }
        None
    }
}
