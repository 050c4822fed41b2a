//! A graceful stop (issue 19: "SIGTERM drains"): no new turns are taken,
//! running turns get the grace to end, then are cancelled through their
//! backends and kept as cancelled (`crate::kept_turns`); the shell exits
//! once [`Host::drained`] and every store write is on disk.

use ahp_types::actions::ChatTurnCancelledAction;
use ahp_types::Uri;

use crate::effect::LogLevel;
use crate::host::Host;
use crate::time::MonoTime;

/// The stop in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drain {
    /// When running turns are cancelled (monotonic).
    pub until: MonoTime,
    /// The grace ran out and the turns still running were cancelled.
    pub cut: bool,
}

/// Why a turn is refused while the host stops.
pub const REFUSED_WHILE_STOPPING: &str = "the host is shutting down and takes no new turns; send it again once it is back";

impl Host {
    /// `Input::Shutdown`: stop taking turns; cancel the running ones after
    /// `grace_ms` (at once for 0).
    pub(crate) fn on_shutdown(&mut self, grace_ms: u64) {
        if self.drain.is_some() {
            return;
        }
        let running = self.running_turns().len();
        crate::mark!("shutdown_drains");
        self.shared.log(LogLevel::Info, "host.draining", None, format!("{running} turns running; they get {grace_ms} ms to end"));
        self.drain = Some(Drain { until: self.shared.now.mono.plus_ms(grace_ms), cut: false });
        self.drain_due();
    }

    /// Whether the host is stopping (turns are refused).
    pub(crate) fn stopping(&self) -> bool {
        self.drain.is_some()
    }

    /// When the grace runs out, if it has not yet.
    pub(crate) fn drain_deadline(&self) -> Option<MonoTime> {
        self.drain.filter(|d| !d.cut).map(|d| d.until)
    }

    /// The grace ran out: every turn still running is cancelled through its
    /// backend and ends cancelled (kept by the host until the backend has
    /// it).
    pub(crate) fn drain_due(&mut self) {
        let Some(drain) = self.drain else { return };
        if drain.cut || self.shared.now.mono < drain.until {
            return;
        }
        self.drain = Some(Drain { cut: true, ..drain });
        let running = self.running_turns();
        if !running.is_empty() {
            crate::mark!("shutdown_cancels_running_turns");
            self.shared.log(LogLevel::Warn, "host.turns_cancelled", None, format!("{} turns still running at the end of the grace were cancelled", running.len()));
        }
        for (session, chat, turn_id) in running {
            let cancel = ChatTurnCancelledAction { turn_id, duration: 0, meta: None };
            if self.in_session(&session, |s, sh| s.cancel_turn(sh, &chat, cancel, None)) != Some(true) {
                continue;
            }
            // The turn's end as `end_turn_bookkeeping` counts it, but with
            // no residency check between two cancels: one would take a
            // session whose turn is cancelled only later in this loop. The
            // next sweep runs it.
            self.in_session(&session, |s, sh| s.turn_ended(sh, &chat));
            self.recount_active();
            self.store_put(&session);
        }
    }

    /// Every turn running in a held session: (session, chat, turn id).
    fn running_turns(&self) -> Vec<(Uri, Uri, String)> {
        self.held_sessions().flat_map(|(uri, s)| s.running_turns().into_iter().map(move |(chat, turn)| (uri.clone(), chat, turn))).collect()
    }

    /// A stop is under way and nothing it waits for is left: no turn runs,
    /// no turn waits to reach its agent, no client action waits for its
    /// write. The shell then finishes the store's writes and exits.
    pub fn drained(&self) -> bool {
        self.drain.is_some()
            && self.running_turns().is_empty()
            && self.sessions.values().all(|s| s.pending_sends.is_empty() && s.sends_in_flight.is_empty() && s.parked.is_none())
    }
}
