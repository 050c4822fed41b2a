//! Admission: the limit on client connections open at once
//! (`Limits::connections_max`; issue 11, "connections in total").
//!
//! A connection over the limit is told why in a JSON-RPC error frame the
//! client can read (`id: null`, code -32600, since no request of its was
//! seen yet), logged, and closed. Requests it manages to send before the
//! close lands get the same error under their own id. Its place is counted
//! again only for connections admitted; a refused one is forgotten at its
//! `Disconnected`, and an admitted one frees its place then.

use super::Host;
use crate::effect::{ConnId, Effect, LogLevel, Outbound};
use crate::protocol::codec::{self, Incoming};
use crate::protocol::error::{error, INVALID_REQUEST};

impl Host {
    /// `Input::Connected`: admits `conn` when fewer than `connections_max`
    /// connections are open, else refuses it (error frame, log line,
    /// `Effect::Close`).
    pub(crate) fn on_connected(&mut self, conn: ConnId) {
        if self.conns.contains_key(&conn) || self.refused.contains(&conn) {
            return;
        }
        let max = self.config.limits.connections_max;
        if self.conns.len() < max {
            return self.admit(conn);
        }
        self.refused.insert(conn);
        crate::mark!("limit_connections_refused");
        self.log(LogLevel::Warn, "limit.connections", None, format!(
            "connection {} refused: {} connections open, the limit is {max}", conn.0, self.conns.len()
        ));
        self.effects.push(Effect::Send { conn, message: Outbound::Error { id: None, error: refusal(max) } });
        self.effects.push(Effect::Close { conn });
    }

    /// A frame from a refused connection: a request gets the refusal under
    /// its id; anything else is dropped.
    pub(crate) fn on_refused_frame(&mut self, conn: ConnId, text: &str) {
        if let Ok(Incoming::Request { id, .. }) = codec::decode_bounded(text, self.config.limits.frame_max_bytes) {
            let error = refusal(self.config.limits.connections_max);
            self.effects.push(Effect::Send { conn, message: Outbound::Error { id: Some(id), error } });
        }
    }
}

/// The error a refused connection reads.
fn refusal(max: usize) -> ahp_types::messages::JsonRpcError {
    error(INVALID_REQUEST, format!("connection limit: this host serves at most {max} connections at once; try again later"))
}
