//! Time as data: the core never reads a clock (style guide 3.3).
//!
//! [`MonoTime`] drives every decision (idle timers, residency sweeps, turn
//! durations); [`WallTime`] is only stamped into data (`createdAt`,
//! `modifiedAt`, `startedAt`). The shell reads both clocks once per input and
//! passes them in as a [`Now`].

use serde::{Deserialize, Serialize};

/// Monotonic time in milliseconds since the host started. Never decreases
/// between two calls to `Host::handle` (the shell clamps its clock reading).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct MonoTime(pub u64);

impl MonoTime {
    /// This time plus `ms` milliseconds, saturating at the far future.
    pub fn plus_ms(self, ms: u64) -> MonoTime {
        MonoTime(self.0.saturating_add(ms))
    }
}

/// Wall-clock time in milliseconds since the Unix epoch (UTC). It may jump
/// backwards or forwards; the core only stamps it into data and keeps
/// `modifiedAt` forward-only itself (decisions.md, 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct WallTime(pub i64);

impl WallTime {
    /// ISO-8601 / RFC 3339 text with millisecond precision, e.g.
    /// `2026-01-01T00:00:01.500Z`, the wire form of every AHP timestamp.
    pub fn to_iso(self) -> String {
        self.iso().to_string()
    }

    /// The same text as [`WallTime::to_iso`], written straight into a
    /// formatter or serializer without a `String` of its own (a catalogue
    /// page writes two per row).
    pub fn iso(self) -> Iso {
        Iso(self)
    }

    /// Parses an RFC 3339 timestamp back into milliseconds since the epoch;
    /// `None` when the text is not a timestamp.
    pub fn parse_iso(text: &str) -> Option<WallTime> {
        text.parse::<jiff::Timestamp>().ok().map(|ts| WallTime(ts.as_millisecond()))
    }
}

/// A [`WallTime`] displayed (and serialized) as its ISO-8601 text with
/// millisecond precision. Times outside jiff's range (years beyond +-9999)
/// show as the epoch rather than text no client can parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Iso(pub WallTime);

impl std::fmt::Display for Iso {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match jiff::Timestamp::from_millisecond(self.0 .0) {
            Ok(ts) => write!(f, "{ts:.3}"),
            Err(_) => f.write_str("1970-01-01T00:00:00.000Z"),
        }
    }
}

impl Serialize for Iso {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Both clocks, read once by the shell (or chosen by the simulator) for one
/// input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Now {
    /// Monotonic milliseconds since host start: drives decisions.
    pub mono: MonoTime,
    /// Wall-clock milliseconds since the epoch: stamped into data.
    pub wall: WallTime,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_round_trips_with_millisecond_precision() {
        let t = WallTime(1_767_225_601_500);
        assert_eq!(t.to_iso(), "2026-01-01T00:00:01.500Z");
        assert_eq!(WallTime::parse_iso(&t.to_iso()), Some(t));
        assert_eq!(WallTime::parse_iso("yesterday"), None);
        // Whole seconds keep their three digits; times before the epoch and
        // beyond jiff's range stay parseable.
        assert_eq!(WallTime(1_767_225_600_000).to_iso(), "2026-01-01T00:00:00.000Z");
        assert_eq!(WallTime(-1).to_iso(), "1969-12-31T23:59:59.999Z");
        assert_eq!(WallTime(i64::MAX).to_iso(), "1970-01-01T00:00:00.000Z");
        assert_eq!(serde_json::to_string(&WallTime(1_767_225_601_007).iso()).ok().as_deref(), Some("\"2026-01-01T00:00:01.007Z\""));
    }
}
