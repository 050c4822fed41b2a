//! The world's pending events, keyed by `(due, seq)` so that ties pop in
//! the order they were scheduled, with FIFO lanes for channels that keep
//! order (one socket direction, one agent's output, one store key).

use std::collections::BTreeMap;

use ahp_types::Uri;
use ahpd_core::{ConnId, Input};

/// Something scheduled to happen in the world.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// An input for the host; dropped when the host crashed after it was
    /// scheduled (its process, sockets and channels are gone).
    Host {
        /// The host incarnation it was meant for.
        incarnation: u64,
        /// The input (boxed: an `Input` is over 500 bytes, and the heap's
        /// B-tree moves its values as it pops and inserts).
        input: Box<Input>,
        /// A short label for the trace.
        label: String,
        /// A client frame's keys, read once when it was sent (`None` for
        /// every other input).
        sent: Option<Box<crate::wire::Sent>>,
    },
    /// A frame from the host reaches client `client` on `conn`.
    Deliver {
        /// The client.
        client: usize,
        /// The connection it was sent on.
        conn: ConnId,
        /// The frame's text.
        text: String,
    },
    /// The host closed `conn` after its queued frames.
    CloseConn {
        /// The client.
        client: usize,
        /// The connection.
        conn: ConnId,
    },
    /// Client `client` decides its next move.
    Think {
        /// The client.
        client: usize,
    },
    /// Client `client` opens a new connection.
    Reconnect {
        /// The client.
        client: usize,
    },
    /// The agent of `chat` takes its next scripted step.
    AgentStep {
        /// The chat.
        chat: Uri,
        /// The agent generation that scheduled it (stale steps are dropped).
        gen: u64,
    },
    /// A store write is answered.
    StoreAck {
        /// The store's id for the write.
        id: u64,
    },
    /// The host process crashes and restarts from the store.
    HostCrash,
    /// The wall clock jumps.
    WallJump,
}

/// An ordered lane: events pushed on one lane are delivered in push order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Lane {
    /// Client to host on one connection.
    ToHost(ConnId),
    /// Host to client on one connection.
    ToClient(ConnId),
    /// One agent's replies and events.
    FromChat(Uri),
    /// One store key's writes.
    Store(String),
}

/// The event heap plus the clock and lanes.
#[derive(Debug, Clone, Default)]
pub struct Queue {
    /// Simulated time, ms since the run began.
    pub now: u64,
    /// The current host incarnation (bumped at every crash).
    pub incarnation: u64,
    seq: u64,
    heap: BTreeMap<(u64, u64), Event>,
    lanes: BTreeMap<Lane, u64>,
    /// Frames in flight to each connection.
    pub inflight_to_conn: BTreeMap<ConnId, u32>,
}

impl Queue {
    /// Schedules `event` `delay_ms` from now.
    pub fn push(&mut self, delay_ms: u64, event: Event) {
        let due = self.now.saturating_add(delay_ms);
        self.push_at(due, event);
    }

    fn push_at(&mut self, due: u64, event: Event) {
        self.seq += 1;
        if let Event::Deliver { conn, .. } = &event {
            *self.inflight_to_conn.entry(*conn).or_default() += 1;
        }
        self.heap.insert((due, self.seq), event);
    }

    /// Schedules `event` `delay_ms` from now, but never before the last
    /// event pushed on `lane`.
    pub fn push_lane(&mut self, lane: Lane, delay_ms: u64, event: Event) {
        let last = self.lanes.get(&lane).copied().unwrap_or(0);
        let due = self.now.saturating_add(delay_ms).max(last);
        self.lanes.insert(lane, due);
        self.push_at(due, event);
    }

    /// Schedules an input for the current host incarnation.
    pub fn to_host(&mut self, lane: Option<Lane>, delay_ms: u64, input: Input, label: String) {
        self.to_host_read(lane, delay_ms, input, label, None);
    }

    /// Schedules an input for the current host incarnation, with what was
    /// read of it already (a client's frame).
    pub fn to_host_read(&mut self, lane: Option<Lane>, delay_ms: u64, input: Input, label: String, sent: Option<Box<crate::wire::Sent>>) {
        let event = Event::Host { incarnation: self.incarnation, input: Box::new(input), label, sent };
        match lane {
            Some(lane) => self.push_lane(lane, delay_ms, event),
            None => self.push(delay_ms, event),
        }
    }

    /// When the earliest event is due.
    pub fn peek_due(&self) -> Option<u64> {
        self.heap.keys().next().map(|(due, _)| *due)
    }

    /// Takes the earliest event.
    pub fn pop(&mut self) -> Option<(u64, Event)> {
        let ((due, _), event) = self.heap.pop_first()?;
        if let Event::Deliver { conn, .. } = &event {
            if let Some(n) = self.inflight_to_conn.get_mut(conn) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.inflight_to_conn.remove(conn);
                }
            }
        }
        Some((due, event))
    }

    /// Whether any pending event is something other than client think
    /// timers and fault timers (used to decide that the world settled).
    pub fn has_work(&self) -> bool {
        self.heap.values().any(|e| !matches!(e, Event::Think { .. } | Event::HostCrash | Event::WallJump))
    }

    /// Pending events, for `pending()` reports.
    pub fn describe(&self, max: usize) -> Vec<String> {
        self.heap
            .iter()
            .filter(|(_, e)| !matches!(e, Event::Think { .. } | Event::HostCrash | Event::WallJump))
            .take(max)
            .map(|((due, _), e)| match e {
                Event::Host { label, incarnation, .. } => format!("@{due} host[{incarnation}] {label}"),
                Event::Deliver { client, conn, text } => format!("@{due} deliver c{client} conn{} {}", conn.0, text.chars().take(80).collect::<String>()),
                other => format!("@{due} {other:?}"),
            })
            .collect()
    }

    /// Keeps only the pending events for which `keep` is true.
    pub fn retain(&mut self, mut keep: impl FnMut(&Event) -> bool) {
        let dropped: Vec<(u64, u64)> = self.heap.iter().filter(|(_, e)| !keep(e)).map(|(k, _)| *k).collect();
        for k in dropped {
            if let Some(Event::Deliver { conn, .. }) = self.heap.remove(&k) {
                if let Some(n) = self.inflight_to_conn.get_mut(&conn) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        self.inflight_to_conn.remove(&conn);
                    }
                }
            }
        }
    }
}
