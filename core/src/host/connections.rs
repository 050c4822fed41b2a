//! Connections: admission, the connection-level commands (`initialize`,
//! `reconnect`, `authenticate`, `subscribe`, `unsubscribe`; docs/REFERENCE-NOTES.md,
//! AHP 2-4), and what a disconnect ends.
//!
//! Admission is the limit on client connections open at once
//! (`Limits::connections_max`; issue 11, "connections in total"). A
//! connection over the limit is told why in a JSON-RPC error frame the
//! client can read (`id: null`, code -32600, since no request of its was
//! seen yet), logged, and closed. Requests it manages to send before the
//! close lands get the same error under their own id. Its place is counted
//! again only for connections admitted; a refused one is forgotten at its
//! `Disconnected`, and an admitted one frees its place then.
//!
//! ## A handshake held for wakes
//!
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
//! the reply ([`crate::shared::Conn::watches`]), so neither sleep nor the
//! residency limit takes one (woken for it or found held) before the client
//! is subscribed to it. The wait is bounded: after [`HANDSHAKE_WAIT_MS`] the
//! handshake is answered with what is held (a session still waking is left
//! out, and goes on waking), well inside a client's request timeout (the
//! `ahp` client's is 30 s, as long as an agent's start-up may take). The
//! connection's frames that come meanwhile wait behind it, decoded, in
//! order.

use ahp_types::commands::{Implementation, InitializeParams, InitializeResult, ReconnectParams, ReconnectReplayResult, ReconnectResult, ReconnectSnapshotResult, SubscribeParams, SubscribeResult, UnsubscribeParams};
use ahp_types::state::{Snapshot, SnapshotState};
use ahp_types::{ROOT_RESOURCE_URI, Uri, negotiate_protocol_version};
use serde_json::Value;
use std::collections::BTreeSet;
use super::Host;
use crate::continuation::{HandshakeReq, InitializeReq, ReconnectReq, SubscribeReq, WaitingRequest};
use crate::effect::{ConnId, Effect, LogLevel, Outbound};
use crate::protocol::codec::{self, Decoded, Incoming};
use crate::protocol::error::{*, INVALID_PARAMS, INVALID_REQUEST, error};
use crate::protocol::params as parse;
use crate::session::{Phase, Waiter};
use crate::grants::Operation;
use crate::shared::{Conn, Handshake, Watched};

/// Most bytes of frames (their text) one connection may have waiting
/// behind its handshake, in bytes (issue 25: by count alone,
/// `pending_requests_per_conn` frames of up to `frame_max_bytes` each was
/// a gigabyte a connection held for the handshake's ten seconds). Past it
/// a request is refused at once (-32600), as past the count. A bound, not
/// a setting.
pub const HANDSHAKE_QUEUE_MAX_BYTES: usize = 16 << 20;

/// At most one `limit.rate` line per connection per this long, in ms.
pub const RATE_LOG_INTERVAL_MS: u64 = 1_000;

/// A connection that keeps exceeding its frame rate this long (in ms, no
/// pause of [`RATE_RUN_GAP_MS`] without a refusal) is closed (issue 25).
pub const RATE_CLOSE_AFTER_MS: u64 = 10_000;

/// A pause in refusals this long (in ms) ends a run of them.
const RATE_RUN_GAP_MS: u64 = 1_000;

impl Host {
    /// Which sessions some connection watches, for a walk over many
    /// ([`Watched`]).
    pub(crate) fn watched(&self) -> Watched<'_> {
        Watched::new(&self.shared.conns)
    }

    pub(crate) fn admit(&mut self, conn: ConnId) {
        let conn_state = self.fresh_conn();
        self.shared.conns.insert(conn, conn_state);
    }

    pub(crate) fn fresh_conn(&self) -> Conn {
        Conn {
            credit_milli: u64::from(self.shared.config.limits.frames_burst) * 1000,
            credit_at: self.shared.now.mono,
            ..Conn::default()
        }
    }

    /// Token bucket: tops the connection's credit up for the time passed
    /// and takes one frame's worth; false when none is left.
    pub(crate) fn take_frame_credit(&mut self, conn: ConnId) -> bool {
        let limits = &self.shared.config.limits;
        let cap = u64::from(limits.frames_burst.max(1)) * 1000;
        let rate = u64::from(limits.frames_per_second.max(1));
        let now = self.shared.now.mono;
        let Some(c) = self.shared.conns.get_mut(&conn) else { return false };
        let elapsed_ms = now.0.saturating_sub(c.credit_at.0);
        c.credit_milli = c.credit_milli.saturating_add(elapsed_ms.saturating_mul(rate)).min(cap);
        c.credit_at = now;
        if c.credit_milli >= 1000 {
            c.credit_milli -= 1000;
            true
        } else {
            false
        }
    }

    /// A frame of `conn` refused over its rate: counted, and said in at most
    /// one `limit.rate` line per connection per [`RATE_LOG_INTERVAL_MS`]
    /// (with the count since the last), never one per frame (issue 25). A
    /// connection refused without a pause of a second for
    /// [`RATE_CLOSE_AFTER_MS`] is closed as a policy violation.
    pub(crate) fn on_rate_refused(&mut self, conn: ConnId) {
        let now = self.shared.now.mono;
        let limit = self.shared.config.limits.frames_per_second;
        let Some(c) = self.shared.conns.get_mut(&conn).filter(|c| !c.rate_closed) else { return };
        c.rate_refused += 1;
        let run_start = match c.rate_over_since {
            Some(since) if now.0.saturating_sub(c.rate_last_refused.0) < RATE_RUN_GAP_MS => since,
            _ => now,
        };
        c.rate_over_since = Some(run_start);
        c.rate_last_refused = now;
        let due = c.rate_logged_at.is_none_or(|at| now.0.saturating_sub(at.0) >= RATE_LOG_INTERVAL_MS);
        let refused = c.rate_refused;
        if due {
            c.rate_refused = 0;
            c.rate_logged_at = Some(now);
        }
        let close = now.0.saturating_sub(run_start.0) >= RATE_CLOSE_AFTER_MS;
        c.rate_closed = close;
        if due {
            self.shared.log(LogLevel::Warn, "limit.rate", None, format!(
                "connection {} sends more than {limit} frames/s: {refused} frames refused since the last line about it", conn.0
            ));
        }
        if close {
            let reason = format!("rate limit: more than {limit} frames per second for {} s", RATE_CLOSE_AFTER_MS / 1000);
            self.shared.log(LogLevel::Warn, "limit.rate_closed", None, format!("connection {}: {reason}; closing it", conn.0));
            self.shared.effects.push(Effect::Close { conn, reason: Some(crate::effect::CloseReason::Policy(reason)) });
        }
    }

    /// `Input::Connected`: admits `conn` when fewer than `connections_max`
    /// connections are open, else refuses it (error frame, log line,
    /// `Effect::Close`).
    pub(crate) fn on_connected(&mut self, conn: ConnId) {
        if self.shared.conns.contains_key(&conn) || self.refused.contains(&conn) {
            return;
        }
        let max = self.shared.config.limits.connections_max;
        if self.shared.conns.len() < max {
            return self.admit(conn);
        }
        self.refused.insert(conn);
        crate::mark!("limit_connections_refused");
        self.shared.log(LogLevel::Warn, "limit.connections", None, format!(
            "connection {} refused: {} connections open, the limit is {max}", conn.0, self.shared.conns.len()
        ));
        self.shared.effects.push(Effect::Send { conn, message: Outbound::Error { id: None, error: refusal(max) } });
        let words = format!("the host is at its connection limit ({max}): try again later");
        self.shared.effects.push(Effect::Close { conn, reason: Some(crate::effect::CloseReason::TryAgainLater(words)) });
    }

    /// A frame from a refused connection: a request gets the refusal under
    /// its id; anything else is dropped.
    pub(crate) fn on_refused_frame(&mut self, conn: ConnId, frame: &codec::Decoded) {
        if let Ok(Incoming::Request { id, .. }) = frame {
            let id = *id;
            let error = refusal(self.shared.config.limits.connections_max);
            self.shared.effects.push(Effect::Send { conn, message: Outbound::Error { id: Some(id), error } });
        }
    }

    /// `initialize`: negotiates the version and subscribes to each of
    /// `initialSubscriptions` the connection may read, answering with their
    /// snapshots; sessions among them whose state is not held are woken
    /// first (`host/connections.rs`).
    pub(crate) fn on_initialize(&mut self, conn: ConnId, id: u64, params: Value) {
        let params: InitializeParams = match parse(params) {
            Ok(p) => p,
            Err(e) => return self.shared.reply_error(conn, id, e),
        };
        let version = match negotiate_protocol_version(&params.protocol_versions) {
            Ok(Some(v)) => v.to_owned(),
            Ok(None) => {
                self.shared.reply_error(conn, id, unsupported_version(&params.protocol_versions));
                self.shared.effects.push(Effect::Close { conn, reason: None });
                return;
            }
            Err(e) => return self.shared.reply_error(conn, id, error(INVALID_PARAMS, e)),
        };
        let mut initial: Vec<Uri> = Vec::new();
        for uri in params.initial_subscriptions.unwrap_or_default() {
            if !initial.contains(&uri) {
                initial.push(uri);
            }
        }
        if let Some(e) = self.too_many_named(initial.len()) {
            return self.shared.reply_error(conn, id, e);
        }
        let request = InitializeReq { client_id: params.client_id, protocol_version: version, subscriptions: initial };
        self.initialize(conn, id, request, true);
    }

    /// [`Host::on_initialize`] from its decoded request; `may_wait` is false
    /// when it runs again after the wakes it waited for, and channels still
    /// not held are left out.
    pub(crate) fn initialize(&mut self, conn: ConnId, id: u64, request: InitializeReq, may_wait: bool) {
        // What the connection may not read is left out, as if unknown: a
        // grant is checked here as on `subscribe` (each time it runs: a
        // channel may have become a session's meanwhile).
        let initial: Vec<Uri> = request.subscriptions.iter().filter(|uri| self.may_read(conn, uri)).cloned().collect();
        let client_id = request.client_id.clone();
        let version = request.protocol_version.clone();
        if may_wait && self.hold_for_wakes(conn, id, HandshakeReq::Initialize(request), &initial) {
            return;
        }
        if let Some(c) = self.shared.conns.get_mut(&conn) {
            c.client_id = Some(client_id);
            c.initialized = true;
        }
        let mut snapshots = Vec::new();
        for uri in initial {
            if let Some(snapshot) = self.snapshot(&uri, None) {
                if let Some(session) = self.session_of(&uri) {
                    self.touch(&session);
                }
                if let Some(c) = self.shared.conns.get_mut(&conn) {
                    c.subscriptions.insert(uri);
                }
                snapshots.push(snapshot);
            }
        }
        let result = InitializeResult {
            protocol_version: version,
            server_seq: self.shared.server_seq as i64,
            server_info: Some(Implementation {
                name: "ahpd".to_owned(),
                version: Some(env!("CARGO_PKG_VERSION").to_owned()),
                title: None,
            }),
            meta: Some([(crate::detached::CAPABILITY.to_owned(), Value::Bool(true))].into_iter().collect()),
            snapshots,
            default_directory: crate::files::default_directory(&self.shared.config),
            completion_trigger_characters: Some(vec![crate::files::mention::TRIGGER.to_string()]),
            terminal_command_prefix: None,
            telemetry: None,
            automations: Some(super::automations::capabilities()),
        };
        let result = self.with_session_configs(serde_json::to_value(result).unwrap_or_default());
        self.shared.reply(conn, id, result);
    }

    /// `reconnect`: replay every envelope after `lastSeenServerSeq` on the
    /// listed channels when the buffer still holds them all, else fresh
    /// snapshots. Accepted without a prior `initialize` (the `ahp`
    /// multi-host client sends it first). Sessions whose state is not held
    /// are woken first (`host/connections.rs`); a channel that is unknown,
    /// that the connection may not read, or whose session could not be
    /// woken is `missing` (left out of a snapshot answer).
    pub(crate) fn on_reconnect(&mut self, conn: ConnId, id: u64, params: Value) {
        let params: ReconnectParams = match parse(params) {
            Ok(p) => p,
            Err(e) => return self.shared.reply_error(conn, id, e),
        };
        let distinct: std::collections::BTreeSet<&Uri> = params.subscriptions.iter().collect();
        if let Some(e) = self.too_many_named(distinct.len()) {
            return self.shared.reply_error(conn, id, e);
        }
        let request = ReconnectReq {
            client_id: params.client_id,
            last_seen_server_seq: params.last_seen_server_seq.max(0) as u64,
            subscriptions: params.subscriptions,
        };
        self.reconnect(conn, id, request, true);
    }

    /// [`Host::on_reconnect`] from its decoded request; `may_wait` as for
    /// [`Host::initialize`].
    pub(crate) fn reconnect(&mut self, conn: ConnId, id: u64, request: ReconnectReq, may_wait: bool) {
        let last_seen = request.last_seen_server_seq;
        let client_id = request.client_id.clone();
        let mut live = Vec::new();
        let mut missing = Vec::new();
        for uri in &request.subscriptions {
            let known = uri == ROOT_RESOURCE_URI || self.automations.state(uri).is_some() || self.session_of(uri).is_some_and(|s| self.sessions.contains_key(&s));
            if !known || !self.may_read(conn, uri) {
                missing.push(uri.clone());
            } else if !live.contains(uri) {
                live.push(uri.clone());
            }
        }
        if may_wait && self.hold_for_wakes(conn, id, HandshakeReq::Reconnect(request), &live) {
            return;
        }
        let (live, unheld): (Vec<Uri>, Vec<Uri>) =
            live.into_iter().partition(|uri| uri == ROOT_RESOURCE_URI || self.snapshot(uri, None).is_some());
        missing.extend(unheld);
        let oldest = self.shared.replay.oldest();
        let replayable = last_seen >= self.shared.server_seq || oldest.is_some_and(|o| o <= last_seen + 1);
        // A channel whose state was made after the client last heard from
        // us (evicted and rebuilt from its backend), or whose URI this
        // process retired (disposed, perhaps made anew since), cannot be
        // brought up to date by replay: answer with snapshots.
        let rebuilt = live.iter().filter(|uri| *uri != ROOT_RESOURCE_URI).any(|uri| {
            let state = self.session_of(uri).and_then(|s| self.sessions.get(&s)).and_then(|s| s.resident());
            self.shared.retired.contains(uri) || state.is_none_or(|r| r.born_seq >= last_seen)
        });
        for uri in &live {
            if let Some(session) = self.session_of(uri) {
                self.touch(&session);
            }
        }
        let replay = (replayable && last_seen <= self.shared.server_seq && !rebuilt).then(|| self.shared.replay.since(last_seen, &live)).flatten();
        let result = match replay {
            Some(actions) => {
                crate::mark!("reconnect_replayed");
                ReconnectResult::Replay(ReconnectReplayResult { actions, missing })
            }
            None => {
                crate::mark!("reconnect_answered_with_snapshots");
                let snapshots = live.iter().filter_map(|uri| self.snapshot(uri, None)).collect();
                ReconnectResult::Snapshot(ReconnectSnapshotResult { snapshots })
            }
        };
        if let Some(c) = self.shared.conns.get_mut(&conn) {
            c.client_id = Some(client_id);
            c.initialized = true;
            c.subscriptions = live.into_iter().collect();
        }
        let result = self.with_session_configs(serde_json::to_value(result).unwrap_or_default());
        self.shared.reply(conn, id, result);
    }

    /// `subscribe`: the snapshot, then every later envelope of the channel.
    /// A session whose state is not held is woken first and the request
    /// answered when the wake ends; a sleeping session whose state is held
    /// is answered at once and woken behind the answer (a subscribe is a
    /// waker).
    pub(crate) fn on_subscribe(&mut self, conn: ConnId, id: u64, params: Value) {
        let params: SubscribeParams = match parse(params) {
            Ok(p) => p,
            Err(e) => return self.shared.reply_error(conn, id, e),
        };
        let view_turns = params.view.as_ref().and_then(|v| v.turns).map(|n| n.max(1) as usize);
        self.subscribe(conn, id, SubscribeReq { channel: params.channel, view_turns });
    }

    /// [`Host::on_subscribe`] from its decoded request: at arrival, and
    /// again when the wake it waited for ends (the grant and the state are
    /// read anew then).
    pub(crate) fn subscribe(&mut self, conn: ConnId, id: u64, request: SubscribeReq) {
        if let Err(e) = self.shared.authorize(conn, self.read_operation(&request.channel)) {
            return self.shared.reply_error(conn, id, e);
        }
        if let Some(e) = self.subscriptions_full(conn, &request.channel) {
            return self.shared.reply_error(conn, id, e);
        }
        if crate::files::is_watch_channel(&request.channel) {
            let outs = self.files().on_subscribe(conn, id, &request.channel);
            return self.apply_files(outs);
        }
        if request.channel == ROOT_RESOURCE_URI || super::automations::is_channel(&request.channel) {
            let Some(snapshot) = self.snapshot(&request.channel, None) else {
                return self.shared.reply_error(conn, id, error(INVALID_PARAMS, format!("no automation run {}", crate::ids::printable(&request.channel))));
            };
            let snapshot = Some(snapshot);
            self.subscribe_conn(conn, &request.channel);
            return self.shared.reply(conn, id, serde_json::to_value(SubscribeResult { snapshot }).unwrap_or_default());
        }
        let Some(session_uri) = self.session_of(&request.channel) else {
            return self.shared.reply_error(conn, id, error(SESSION_NOT_FOUND, format!("no session or chat {}", crate::ids::printable(&request.channel))));
        };
        let (phase, resident) = match self.sessions.get(&session_uri) {
            Some(s) => (s.phase().clone(), s.resident().is_some()),
            None => return,
        };
        if matches!(phase, Phase::Disposing(_)) {
            return self.shared.reply_error(conn, id, error(SESSION_NOT_FOUND, "the session is being disposed"));
        }
        self.touch(&session_uri);
        if !resident {
            if let Some(e) = self.waiting_full(conn) {
                return self.shared.reply_error(conn, id, e);
            }
            if let Some(s) = self.sessions.get_mut(&session_uri) {
                crate::mark!("subscribe_wakes_session");
                s.wait(Waiter::Request { conn, id, request: WaitingRequest::Subscribe(request) });
            }
            self.wake(&session_uri);
            return;
        }
        let snapshot = self.snapshot(&request.channel, request.view_turns);
        self.subscribe_conn(conn, &request.channel);
        let result = self.with_session_configs(serde_json::to_value(SubscribeResult { snapshot }).unwrap_or_default());
        self.shared.reply(conn, id, result);
        if phase == Phase::Asleep {
            self.wake(&session_uri);
        }
    }

    /// The -32602 refusal when `conn` may not take one more subscription.
    fn subscriptions_full(&mut self, conn: ConnId, channel: &str) -> Option<ahp_types::messages::JsonRpcError> {
        let max = self.shared.config.limits.subscriptions_per_conn;
        let c = self.shared.conns.get(&conn)?;
        if c.subscriptions.contains(channel) || c.subscriptions.len() < max {
            return None;
        }
        crate::mark!("limit_subscriptions_refused");
        self.shared.log(LogLevel::Warn, "limit.subscriptions", None, format!("connection {} holds {max} subscriptions", conn.0));
        Some(error(INVALID_PARAMS, format!("too many subscriptions: a connection may hold {max}; unsubscribe first")))
    }

    /// The -32602 refusal when `conn` already has as many requests waiting
    /// for wakes as it may.
    pub(crate) fn waiting_full(&mut self, conn: ConnId) -> Option<ahp_types::messages::JsonRpcError> {
        let max = self.shared.config.limits.pending_requests_per_conn;
        let held = self.shared.conns.get(&conn).is_some_and(|c| c.handshake.is_some());
        let waiting: usize = self
            .sessions
            .values()
            .map(|s| s.work().waiters.iter().filter(|w| matches!(w, Waiter::Request { conn: c, .. } if *c == conn)).count())
            .sum::<usize>()
            + usize::from(held);
        if waiting < max {
            return None;
        }
        crate::mark!("limit_pending_requests_refused");
        self.shared.log(LogLevel::Warn, "limit.pending_requests", None, format!("connection {} has {max} requests waiting", conn.0));
        Some(error(INVALID_PARAMS, format!("too many requests waiting: a connection may have {max} waiting at once")))
    }

    fn subscribe_conn(&mut self, conn: ConnId, channel: &Uri) {
        if let Some(c) = self.shared.conns.get_mut(&conn) {
            c.subscriptions.insert(channel.clone());
        }
    }

    pub(crate) fn on_unsubscribe(&mut self, conn: ConnId, params: Value) {
        let Ok(params) = parse::<UnsubscribeParams>(params) else { return };
        if let Some(c) = self.shared.conns.get_mut(&conn) {
            c.subscriptions.remove(&params.channel);
        }
        if crate::files::is_watch_channel(&params.channel) {
            let outs = self.files().on_unsubscribed(&params.channel);
            self.apply_files(outs);
        }
    }

    pub(crate) fn on_disconnected(&mut self, conn: ConnId) {
        if let Some(gone) = self.shared.conns.remove(&conn) {
            // The refusals since its last `limit.rate` line are said once
            // more as it goes, so the lines' counts add up to every frame
            // refused (issue 25).
            if gone.rate_refused > 0 {
                let limit = self.shared.config.limits.frames_per_second;
                self.shared.log(LogLevel::Warn, "limit.rate", None, format!(
                    "connection {} sends more than {limit} frames/s: {} frames refused since the last line about it; it went", conn.0, gone.rate_refused
                ));
            }
            let of_conn = |w: &Waiter| matches!(w, Waiter::Request { conn: c, .. } | Waiter::Handshake { conn: c, .. } if *c == conn);
            // Only the sessions it waited on are handed out to change, so
            // the indexes kept per changed session (`SessionTable`) and the
            // checks of touched sessions do not redo every session.
            let waited: Vec<Uri> = self.sessions.iter().filter(|(_, s)| s.work().waiters.iter().any(of_conn)).map(|(u, _)| u.clone()).collect();
            for uri in waited {
                if let Some(session) = self.sessions.get_mut(&uri) {
                    session.forget_waiters(of_conn);
                }
            }
            let outs = self.files().on_disconnected(conn);
            self.apply_files(outs);
            self.shared.log(LogLevel::Info, "client.disconnected", None, format!("connection {}", conn.0));
        }
    }

    /// A reply carrying snapshots (`snapshots` of `initialize` and
    /// `reconnect`, `snapshot` of `subscribe`) with each session's `config`
    /// filled in, in the page's order ([`crate::session::state::session_config`]).
    fn with_session_configs(&self, mut reply: Value) -> Value {
        let fill = |snapshot: &mut Value| {
            let Some(uri) = snapshot.get("resource").and_then(Value::as_str) else { return };
            let Some(session) = self.sessions.get(uri) else { return };
            let Some(config) = crate::session::state::session_config(session.record()) else { return };
            if let Some(state) = snapshot.get_mut("state").and_then(Value::as_object_mut) {
                state.insert("config".to_owned(), config);
            }
        };
        if let Some(list) = reply.get_mut("snapshots").and_then(Value::as_array_mut) {
            list.iter_mut().for_each(fill);
        }
        if let Some(one) = reply.get_mut("snapshot") {
            fill(one);
        }
        reply
    }

    /// The snapshot of a channel whose state is held, stamped with the
    /// current `serverSeq`; a chat's turns cut to the newest `view_turns`
    /// with `turnsNextCursor` set when older ones remain.
    pub(crate) fn snapshot(&self, uri: &str, view_turns: Option<usize>) -> Option<Snapshot> {
        let state = if uri == ROOT_RESOURCE_URI {
            SnapshotState::Root(Box::new(self.shared.root.clone()))
        } else if let Some(state) = self.automations.state(uri) {
            state
        } else if crate::files::is_watch_channel(uri) {
            return self.files.snapshot(uri, self.shared.server_seq);
        } else {
            let session_uri = self.session_of(uri)?;
            let resident = self.sessions.get(&session_uri)?.resident()?;
            if uri == session_uri {
                SnapshotState::Session(Box::new(resident.session.clone()))
            } else {
                let mut chat = resident.chats.get(uri)?.clone();
                if let Some(n) = view_turns {
                    if chat.turns.len() > n {
                        let cut = chat.turns.len() - n;
                        chat.turns.drain(..cut);
                        chat.turns_next_cursor = chat.turns.first().map(|t| crate::cursor::turns_before(&t.id));
                    }
                }
                SnapshotState::Chat(Box::new(chat))
            }
        };
        Some(Snapshot { resource: uri.to_owned(), state, from_seq: self.shared.server_seq as i64 })
    }
}

// ---- Signing in (`authenticate`, a bearer token) ----
impl Host {
    /// `authenticate`: on a host with a users directory, a token that
    /// matches a user's makes the connection that user; a wrong token is
    /// -32602 and is logged without its value. On a host with no users
    /// directory there is nobody to be, and it answers `{}`.
    pub(crate) fn on_authenticate(&mut self, conn: ConnId, id: u64, params: Value) {
        let params: ahp_types::commands::AuthenticateParams = match parse(params) {
            Ok(p) => p,
            Err(e) => return self.shared.reply_error(conn, id, e),
        };
        if self.shared.config.users.is_none() {
            return self.shared.reply(conn, id, serde_json::json!({}));
        }
        if self.sign_in(conn, &params.token) {
            self.shared.reply(conn, id, serde_json::json!({}));
        } else {
            crate::mark!("auth_failed");
            self.shared.log(LogLevel::Warn, "client.auth_failed", None, format!("connection {}: token matches no user", conn.0));
            self.shared.reply_error(conn, id, error(INVALID_PARAMS, "authentication failed: the token matches no user"));
        }
    }

    /// `Input::Authenticate`: the handshake's bearer token signs the
    /// connection in as `authenticate` would, with no reply; one that
    /// names nobody closes the connection (a client that presented a
    /// credential is never served as somebody else, or as nobody). A
    /// connection refused at `Connected` is closing already.
    pub(crate) fn on_bearer(&mut self, conn: ConnId, token: &str) {
        if self.refused.contains(&conn) {
            return;
        }
        if !self.shared.conns.contains_key(&conn) {
            // As for a frame: a connection the host never saw connect is
            // taken as connected (within the connection limit).
            self.on_connected(conn);
            if self.refused.contains(&conn) {
                return;
            }
        }
        if self.shared.config.users.is_none() || self.sign_in(conn, token) {
            return;
        }
        crate::mark!("auth_failed");
        self.shared.log(LogLevel::Warn, "client.auth_failed", None, format!(
            "connection {}: the handshake's bearer token matches no user; closing the connection", conn.0
        ));
        self.shared.effects.push(Effect::Close { conn, reason: None });
    }

    /// Makes `conn` whoever `token` names on a host with a users directory
    /// (the host's own token first, then users, then plugins) and logs who;
    /// false when it names nobody (nothing changes, nothing is logged).
    fn sign_in(&mut self, conn: ConnId, token: &str) -> bool {
        let Some(users) = self.shared.config.users.as_ref() else { return false };
        let is_root = self.shared.config.host_token_sha256.as_deref().is_some_and(|h| crate::grants::is_host_token(token, h));
        let principal = if is_root {
            Some(crate::grants::Principal::Root { host: self.shared.config.host_name.clone() })
        } else if let Some(user) = users.authenticate(token) {
            Some(crate::grants::Principal::User {
                id: user.id.clone(),
                role: user.role,
                administrator: user.administrator,
                memberships: user.memberships.clone(),
            })
        } else {
            users.authenticate_plugin(token).map(|p| crate::grants::Principal::Plugin { name: p.name.clone(), role: p.role })
        };
        let Some(principal) = principal else { return false };
        let owner = principal.owner();
        if let Some(c) = self.shared.conns.get_mut(&conn) {
            c.principal = Some(principal);
        }
        crate::mark!("authenticated");
        self.shared.log(LogLevel::Info, "client.authenticated", None, format!("connection {} is {owner}", conn.0));
        true
    }
}

/// The error a refused connection reads.
fn refusal(max: usize) -> ahp_types::messages::JsonRpcError {
    error(INVALID_REQUEST, format!("connection limit: this host serves at most {max} connections at once; try again later"))
}

/// How long a handshake waits for the wakes of the sessions it names
/// before it is answered with what is held, in ms.
pub const HANDSHAKE_WAIT_MS: u64 = 10_000;

// ---- A handshake held for wakes (module docs) ----
impl Host {
    /// The grant a read of `channel` needs: the root and the automations'
    /// catalogue are the session list, a session or an automation's run its
    /// state, anything else a chat's turns.
    pub(crate) fn read_operation(&self, channel: &str) -> Operation {
        if channel == ROOT_RESOURCE_URI || channel == crate::automation::AUTOMATIONS_URI {
            Operation::SessionList
        } else if super::automations::is_channel(channel) || self.sessions.contains_key(channel) {
            Operation::SessionState
        } else {
            Operation::ChatTurns
        }
    }

    /// Whether `conn` may be sent `channel`'s snapshot and envelopes (always
    /// on a host with no users directory).
    pub(crate) fn may_read(&self, conn: ConnId, channel: &str) -> bool {
        if crate::files::is_watch_channel(channel) {
            let owner = self.shared.owner_of(conn);
            return self.files.may_subscribe(self.shared.config.users.is_some(), owner.as_deref(), channel);
        }
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
                    .get(uri)
                    .is_some_and(|s| s.resident().is_none() && matches!(s.phase(), Phase::Asleep | Phase::Waking(_)))
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
                s.wait(Waiter::Handshake { conn, id });
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

    /// When the first held handshake's wait is over, if one waits.
    pub(crate) fn handshake_deadline(&self) -> Option<crate::time::MonoTime> {
        self.shared.conns.values().filter_map(|c| c.handshake.as_ref().map(|h| h.until)).min()
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
        while let Some((frame, bytes)) = queued.next() {
            if !self.shared.conns.contains_key(&conn) {
                return;
            }
            if let Some(next) = self.shared.conns.get_mut(&conn).and_then(|c| c.handshake.as_mut()) {
                next.queued.push((frame, bytes));
                next.queued.extend(queued);
                return;
            }
            self.run_frame(conn, frame);
        }
    }

    /// Keeps a decoded frame of `conn` that came while its handshake waits,
    /// to run after the answer. Hands the frame back when there is no
    /// handshake waiting. `bytes` is the frame's text length. Past the
    /// connection's limit of waiting requests, or of their bytes
    /// ([`HANDSHAKE_QUEUE_MAX_BYTES`]), a request is refused at once
    /// (-32600) and anything else dropped, with a warning.
    pub(crate) fn queue_behind_handshake(&mut self, conn: ConnId, frame: Decoded, bytes: usize) -> Option<Decoded> {
        let max = self.shared.config.limits.pending_requests_per_conn;
        let Some(held) = self.shared.conns.get_mut(&conn).and_then(|c| c.handshake.as_mut()) else { return Some(frame) };
        let waiting: usize = held.queued.iter().map(|(_, b)| b).sum();
        let why = if held.queued.len() >= max {
            format!("{max} frames already wait behind this connection's handshake")
        } else if waiting + bytes > HANDSHAKE_QUEUE_MAX_BYTES {
            crate::mark!("limit_handshake_queue_bytes");
            format!("{waiting} bytes of frames already wait behind this connection's handshake (at most {HANDSHAKE_QUEUE_MAX_BYTES})")
        } else {
            held.queued.push((frame, bytes));
            return None;
        };
        self.shared.log(LogLevel::Warn, "limit.pending_requests", None, format!("connection {}: {why}", conn.0));
        if let Ok(Incoming::Request { id, .. }) = frame {
            let message = format!("too many requests waiting: {why}");
            self.shared.reply_error(conn, id, error(INVALID_REQUEST, message));
        }
        None
    }
}
