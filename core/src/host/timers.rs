//! The host's timer table (quinn-proto's `TimerTable`, docs/STYLE.md): every
//! kind of timed work the host keeps, each with its deadline and its fire,
//! walked in one order by both [`Host::handle`] (after every input, each
//! kind firing what is due) and [`Host::next_deadline`] (the earliest
//! deadline of any kind). A kind is added here once, so no timer can be
//! scheduled and never fired, or fired and never scheduled.
//!
//! Two kinds are kept in wall-clock time (an agent's `schedule_wakeup`, an
//! automation's schedule): their deadlines are wall times, projected onto
//! the monotonic clock in one place ([`Due::project`]) from both clocks'
//! readings at the current input, so a wall clock that jumps moves them at
//! the next input.

use super::Host;
use crate::time::{MonoTime, Now, WallTime};

/// One kind of timed work, in the order [`Timer::ALL`] fires them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timer {
    /// A pass over a backend's transcripts merged a slice per tick
    /// (`host/discovery.rs`).
    ScanMerge,
    /// A graceful stop's grace running out: running turns are cancelled
    /// (`host/agents.rs`).
    Drain,
    /// A queued start the store refused, tried again
    /// (`session/pending.rs`, fired from `host/agents.rs`).
    QueueRetry,
    /// A wake an agent asked for with `schedule_wakeup`, in wall time
    /// (`host/tools.rs`).
    Wake,
    /// Child sessions' turn ends owed to their parents (`host/children.rs`).
    ChildrenOwed,
    /// An automation's scheduled occurrence, in wall time
    /// (`host/automations.rs`).
    Automation,
    /// A handshake held for wakes, answered when its wait is over
    /// (`host/connections.rs`).
    Handshake,
    /// An idle session falls asleep after `sleepAfterMinutes`
    /// (`host/agents.rs`).
    IdleSleep,
    /// The once-a-minute residency sweep; the residency limit is checked
    /// after every input (`host/agents.rs`).
    Residency,
    /// Workspace awareness: publishing, the heartbeat, held-back scans
    /// (`host/awareness.rs`).
    Awareness,
}

/// When a timer is due: on the monotonic clock, or at a wall time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Due {
    /// A monotonic time.
    Mono(MonoTime),
    /// A wall time (work a person or an agent scheduled by the clock).
    Wall(WallTime),
}

impl Due {
    /// The monotonic time this is due at, read from both clocks at `now`:
    /// a wall time `d` ms ahead of `now.wall` is `d` ms after `now.mono`
    /// (one already past is now).
    pub(crate) fn project(self, now: Now) -> MonoTime {
        match self {
            Due::Mono(at) => at,
            Due::Wall(at) => now.mono.plus_ms(u64::try_from(at.0.saturating_sub(now.wall.0)).unwrap_or(0)),
        }
    }
}

impl Timer {
    /// Every kind, in the order they fire after an input: what one kind's
    /// fire changes, the kinds after it see in the same input.
    pub(crate) const ALL: [Timer; 10] = [
        Timer::ScanMerge,
        Timer::Drain,
        Timer::QueueRetry,
        Timer::Wake,
        Timer::ChildrenOwed,
        Timer::Automation,
        Timer::Handshake,
        Timer::IdleSleep,
        Timer::Residency,
        Timer::Awareness,
    ];

    /// When this kind next has work, if it has any.
    pub(crate) fn due(self, host: &Host) -> Option<Due> {
        match self {
            Timer::ScanMerge => host.discovery.deadline(host.shared.now.mono).map(Due::Mono),
            Timer::Drain => host.drain_deadline().map(Due::Mono),
            Timer::QueueRetry => host.queue_retry_deadline().map(Due::Mono),
            Timer::Wake => host.tools.wake_due(host.stopping()).map(Due::Wall),
            Timer::ChildrenOwed => host.tools.family.owed_deadline(host.stopping(), host.shared.now.mono).map(Due::Mono),
            Timer::Automation => host.automations.due(host.stopping()).map(Due::Wall),
            Timer::Handshake => host.handshake_deadline().map(Due::Mono),
            Timer::IdleSleep => host.idle_sleep_deadline().map(Due::Mono),
            Timer::Residency => host.residency_sweep_deadline().map(Due::Mono),
            Timer::Awareness => host.awareness.deadline(&host.shared.config).map(Due::Mono),
        }
    }

    /// Runs what this kind has due now (each kind checks its own
    /// deadlines: it is called after every input, a `tick` or not).
    pub(crate) fn fire(self, host: &mut Host, tick: bool) {
        match self {
            Timer::ScanMerge => host.merge_if_due(tick),
            Timer::Drain => host.drain_due(),
            Timer::QueueRetry => host.retry_queued_starts(),
            Timer::Wake => host.fire_wakes(),
            Timer::ChildrenOwed => host.deliver_owed_children(),
            Timer::Automation => {
                // One occurrence at a time: each one's outs are applied
                // before the next is evaluated (it may pin the same session).
                while let Some(outs) = host.automation().fire_next() {
                    host.apply_automation(outs);
                }
            }
            Timer::Handshake => host.answer_overdue_handshakes(),
            Timer::IdleSleep => host.fire_idle_sleeps(),
            Timer::Residency => host.fire_residency(),
            Timer::Awareness => host.aware().tick(),
        }
    }

    /// Fires every kind, in [`Timer::ALL`]'s order (the end of
    /// [`Host::handle`]).
    pub(crate) fn fire_all(host: &mut Host, tick: bool) {
        for timer in Timer::ALL {
            timer.fire(host, tick);
        }
    }

    /// The earliest deadline of any kind, on the monotonic clock
    /// ([`Host::next_deadline`]).
    pub(crate) fn earliest(host: &Host) -> Option<MonoTime> {
        Timer::ALL.into_iter().filter_map(|t| t.due(host)).map(|d| d.project(host.shared.now)).min()
    }
}
