//! Time as data: the core never reads a clock (docs/STYLE.md 3.3).
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
/// `modifiedAt` forward-only itself (docs/DECISIONS.md, 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct WallTime(pub i64);

impl WallTime {
    /// ISO-8601 / RFC 3339 text with millisecond precision, e.g.
    /// `2026-01-01T00:00:01.500Z`, the wire form of every AHP timestamp.
    pub fn to_iso(self) -> String {
        self.iso().to_string()
    }

    /// The same text as [`WallTime::to_iso`] as a record's `Text` (a
    /// `compact_str::CompactString`, the type `record::Text` names):
    /// held inline, with no allocation, for years 0 to 9999 ([`Iso::fast`]).
    pub fn to_iso_text(self) -> compact_str::CompactString {
        let mut buf = [0u8; 24];
        match self.iso().fast(&mut buf) {
            Some(text) => compact_str::CompactString::new(text),
            None => compact_str::CompactString::from(self.to_iso()),
        }
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
///
/// Years 0 to 9999 are written by [`Iso::fast`] into a 24-byte buffer on
/// the stack (a catalogue page writes two per row, and jiff's general
/// printer was half of a 500-row page's time: issue 4's benchmark); the
/// text is jiff's own, which a property test checks across the range.
/// Other years go through jiff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Iso(pub WallTime);

/// Milliseconds since the epoch of 0000-01-01T00:00:00Z and of
/// 10000-01-01T00:00:00Z: the range [`Iso::fast`] writes.
const FAST_FROM_MS: i64 = -62_167_219_200_000;
const FAST_UNTIL_MS: i64 = 253_402_300_800_000;

impl Iso {
    /// `YYYY-MM-DDTHH:MM:SS.mmmZ` into `buf` for a year from 0 to 9999
    /// (the civil-from-days conversion of the proleptic Gregorian
    /// calendar); `None` outside that range.
    pub fn fast(self, buf: &mut [u8; 24]) -> Option<&str> {
        let ms = self.0 .0;
        if !(FAST_FROM_MS..FAST_UNTIL_MS).contains(&ms) {
            return None;
        }
        let days = ms.div_euclid(86_400_000);
        let in_day = ms.rem_euclid(86_400_000);
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        let (h, m, s, milli) = (in_day / 3_600_000, in_day / 60_000 % 60, in_day / 1000 % 60, in_day % 1000);
        let mut put = |at: usize, value: i64, width: usize| {
            let mut v = value;
            for i in (0..width).rev() {
                buf[at + i] = b'0' + (v % 10) as u8;
                v /= 10;
            }
        };
        put(0, year, 4);
        put(5, month, 2);
        put(8, day, 2);
        put(11, h, 2);
        put(14, m, 2);
        put(17, s, 2);
        put(20, milli, 3);
        for (at, c) in [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':'), (19, b'.'), (23, b'Z')] {
            buf[at] = c;
        }
        std::str::from_utf8(&buf[..]).ok()
    }
}

impl std::fmt::Display for Iso {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut buf = [0u8; 24];
        if let Some(text) = self.fast(&mut buf) {
            return f.write_str(text);
        }
        match jiff::Timestamp::from_millisecond(self.0 .0) {
            Ok(ts) => write!(f, "{ts:.3}"),
            Err(_) => f.write_str("1970-01-01T00:00:00.000Z"),
        }
    }
}

impl Serialize for Iso {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut buf = [0u8; 24];
        match self.fast(&mut buf) {
            Some(text) => s.serialize_str(text),
            None => s.collect_str(self),
        }
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
        // The edges of the fast range, and just outside it (jiff's text).
        assert_eq!(WallTime(FAST_FROM_MS).to_iso(), "0000-01-01T00:00:00.000Z");
        assert_eq!(WallTime(FAST_UNTIL_MS - 1).to_iso(), "9999-12-31T23:59:59.999Z");
        assert_eq!(WallTime(FAST_FROM_MS - 1).to_iso(), "-000001-12-31T23:59:59.999Z");
        assert_eq!(WallTime(951_782_400_000).to_iso(), "2000-02-29T00:00:00.000Z");
    }

    fn jiff_text(ms: i64) -> String {
        match jiff::Timestamp::from_millisecond(ms) {
            Ok(ts) => format!("{ts:.3}"),
            Err(_) => "1970-01-01T00:00:00.000Z".to_owned(),
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(20_000))]
        /// The fast writer's text is jiff's, for every millisecond of years
        /// 0 to 9999 and around them.
        #[test]
        fn fast_text_is_jiffs(ms in (FAST_FROM_MS - 86_400_000 * 400)..(FAST_UNTIL_MS + 86_400_000 * 400)) {
            proptest::prop_assert_eq!(WallTime(ms).to_iso(), jiff_text(ms));
        }
    }
}
