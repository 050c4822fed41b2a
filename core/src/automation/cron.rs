//! AHP's portable schedule (`AutomationSchedule`): a five-field cron
//! expression read in an IANA time zone, and the next occurrence after an
//! instant (docs/DECISIONS.md, 26).
//!
//! The grammar is AHP's and only AHP's: exactly five fields (minute, hour,
//! day of month, month, day of week); each `*`, a value, an inclusive range,
//! a comma-separated list of values and ranges, or a positive step on `*` or
//! a range; month names `JAN`–`DEC` and weekday names `SUN`–`SAT` in any
//! case; `0` and `7` both Sunday. No seconds, years, macros (`@daily`) or
//! Quartz extensions (`?`, `L`, `W`, `#`): each is refused with a message
//! that names the field. When both day fields are restricted (not `*`),
//! a day matches when either does (Unix cron).
//!
//! Time zones come from the IANA database jiff bundles into the binary
//! (`TimeZoneDatabase::bundled`), so the core reads no file for them and a
//! zone means the same on every machine. The fields are matched against the
//! local calendar time in the zone: a local minute a daylight-saving gap
//! skips has no occurrence, and a minute a fold repeats occurs at each of
//! its instants (the AHP automations guide's rule).

use jiff::civil::Date;
use jiff::tz::{AmbiguousOffset, TimeZone, TimeZoneDatabase};
use jiff::Timestamp;

/// How many local days ahead an occurrence is looked for: 29 years cover
/// every pattern of weekdays and leap days (`0 0 29 2 1` included), so an
/// expression with none in that span has none at all.
const HORIZON_DAYS: u32 = 29 * 366;

/// A parsed schedule: the matching sets of each field and its zone.
#[derive(Debug, Clone)]
pub struct Schedule {
    minutes: u64,
    hours: u32,
    /// Days of month 1–31, bit `d`.
    days: u32,
    /// Months 1–12, bit `m`.
    months: u16,
    /// Weekdays, Sunday 0 … Saturday 6, bit `w`.
    weekdays: u8,
    days_restricted: bool,
    weekdays_restricted: bool,
    zone: TimeZone,
}

const MONTHS: [&str; 12] = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"];
const WEEKDAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// One field's rules: its name (for messages), its range, its names.
struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
    /// The first name's value (`JAN` = 1, `SUN` = 0).
    names_from: u32,
}

const FIELDS: [Field; 5] = [
    Field { name: "minute", min: 0, max: 59, names: &[], names_from: 0 },
    Field { name: "hour", min: 0, max: 23, names: &[], names_from: 0 },
    Field { name: "day of month", min: 1, max: 31, names: &[], names_from: 0 },
    Field { name: "month", min: 1, max: 12, names: &MONTHS, names_from: 1 },
    Field { name: "day of week", min: 0, max: 7, names: &WEEKDAYS, names_from: 0 },
];

impl Schedule {
    /// Parses `expression` read in time zone `time_zone`.
    ///
    /// Errors: a message naming what is wrong (`the day of week field ...`,
    /// `unknown time zone ...`), for a -32602 or a rejected action.
    pub fn parse(expression: &str, time_zone: &str) -> Result<Schedule, String> {
        let zone = zone(time_zone)?;
        let parts: Vec<&str> = expression.split_whitespace().collect();
        if parts.len() != 5 {
            return Err(format!(
                "expression must have exactly five fields (minute hour day-of-month month day-of-week), not {}",
                parts.len()
            ));
        }
        let mut sets = [0u64; 5];
        for (i, (part, field)) in parts.iter().zip(FIELDS.iter()).enumerate() {
            sets[i] = parse_field(part, field).map_err(|e| format!("the {} field {:?}: {e}", field.name, crate::ids::printable_up_to(part, 40)))?;
        }
        // 7 is Sunday as 0 is.
        let mut weekdays = sets[4];
        if weekdays & (1 << 7) != 0 {
            weekdays = (weekdays | 1) & !(1 << 7);
        }
        Ok(Schedule {
            minutes: sets[0],
            hours: sets[1] as u32,
            days: sets[2] as u32,
            months: sets[3] as u16,
            weekdays: weekdays as u8,
            days_restricted: parts[2] != "*",
            weekdays_restricted: parts[4] != "*",
            zone,
        })
    }

    /// Whether local `date` is a day the schedule runs on.
    fn day_matches(&self, date: Date) -> bool {
        let month = self.months & (1 << date.month()) != 0;
        let dom = self.days & (1 << date.day()) != 0;
        let dow = self.weekdays & (1 << date.weekday().to_sunday_zero_offset()) != 0;
        let day = if self.days_restricted && self.weekdays_restricted { dom || dow } else { dom && dow };
        month && day
    }

    /// The first occurrence strictly after `after_ms` (wall-clock ms since
    /// the epoch), as ms since the epoch; `None` when there is none within
    /// [`HORIZON_DAYS`] (an expression that never occurs, or the end of
    /// time).
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        let after = Timestamp::from_millisecond(after_ms).ok()?;
        // A day back: a fold may put an instant after `after` on the local
        // day before the one `after` reads as.
        let mut day = self.zone.to_datetime(after).date().yesterday().ok()?;
        for _ in 0..HORIZON_DAYS {
            if self.day_matches(day) {
                // Local times of one day are in order across days, not
                // within a fold: the earliest instant of the day wins.
                let mut best: Option<i64> = None;
                for hour in (0..24).filter(|h| self.hours & (1 << h) != 0) {
                    for minute in (0..60).filter(|m| self.minutes & (1u64 << m) != 0) {
                        let dt = day.at(hour as i8, minute as i8, 0, 0);
                        let offsets = match self.zone.to_ambiguous_timestamp(dt).offset() {
                            AmbiguousOffset::Unambiguous { offset } => [Some(offset), None],
                            AmbiguousOffset::Gap { .. } => [None, None],
                            AmbiguousOffset::Fold { before, after } => [Some(before), Some(after)],
                        };
                        for offset in offsets.into_iter().flatten() {
                            let Ok(ts) = offset.to_timestamp(dt) else { continue };
                            let ms = ts.as_millisecond();
                            if ms > after_ms && best.is_none_or(|b| ms < b) {
                                best = Some(ms);
                            }
                        }
                    }
                }
                if best.is_some() {
                    return best;
                }
            }
            day = day.tomorrow().ok()?;
        }
        None
    }
}

/// The zone named `name` in the bundled IANA database.
fn zone(name: &str) -> Result<TimeZone, String> {
    if name.is_empty() || name.len() > 64 {
        return Err("timeZone must be an IANA time zone name such as \"UTC\" or \"Europe/Berlin\"".to_owned());
    }
    TimeZoneDatabase::bundled().get(name).map_err(|_| format!("timeZone {:?} is not an IANA time zone this host knows", crate::ids::printable_up_to(name, 64)))
}

/// One field's matching set (bit `v` for value `v`).
fn parse_field(text: &str, field: &Field) -> Result<u64, String> {
    let mut set = 0u64;
    for item in text.split(',') {
        if item.is_empty() {
            return Err("an empty list item".to_owned());
        }
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s.parse().ok().filter(|n| *n > 0 && s.bytes().all(|b| b.is_ascii_digit())).ok_or_else(|| format!("step {:?} is not a positive integer", crate::ids::printable_up_to(s, 12)))?;
                (r, Some(step))
            }
            None => (item, None),
        };
        let (lo, hi) = if range == "*" {
            (field.min, field.max)
        } else if let Some((a, b)) = range.split_once('-') {
            let (a, b) = (value(a, field)?, value(b, field)?);
            if a > b {
                return Err(format!("range {a}-{b} runs backwards"));
            }
            (a, b)
        } else {
            if step.is_some() {
                return Err("a step applies to * or a range only".to_owned());
            }
            let v = value(range, field)?;
            (v, v)
        };
        let step = step.unwrap_or(1);
        let mut v = lo;
        while v <= hi {
            set |= 1 << v;
            v += step;
        }
    }
    Ok(set)
}

/// One value of a field: a number in its range or one of its names.
fn value(text: &str, field: &Field) -> Result<u32, String> {
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) && text.len() <= 2 {
        let v: u32 = text.parse().map_err(|_| "not a number".to_owned())?;
        if v < field.min || v > field.max {
            return Err(format!("{v} is outside {}-{}", field.min, field.max));
        }
        return Ok(v);
    }
    if let Some(i) = field.names.iter().position(|n| n.eq_ignore_ascii_case(text)) {
        return Ok(i as u32 + field.names_from);
    }
    Err(format!("{:?} is not a value of this field (AHP cron has no ?, L, W, # or macros)", crate::ids::printable_up_to(text, 12)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> i64 {
        text.parse::<Timestamp>().map(|t| t.as_millisecond()).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn iso(ms: i64) -> String {
        Timestamp::from_millisecond(ms).map(|t| t.to_string()).unwrap_or_default()
    }

    fn next(expr: &str, tz: &str, after: &str) -> Option<String> {
        Schedule::parse(expr, tz).unwrap_or_else(|e| panic!("{expr}: {e}")).next_after(at(after)).map(iso)
    }

    #[test]
    fn the_guides_examples_occur_when_they_say() {
        assert_eq!(next("0 * * * *", "UTC", "2026-01-01T10:00:00Z").as_deref(), Some("2026-01-01T11:00:00Z"));
        assert_eq!(next("30 9 * * *", "UTC", "2026-01-01T10:00:00Z").as_deref(), Some("2026-01-02T09:30:00Z"));
        // 2026-01-02 is a Friday; the next weekday after it is Monday the 5th.
        assert_eq!(next("30 9 * * MON-FRI", "UTC", "2026-01-02T10:00:00Z").as_deref(), Some("2026-01-05T09:30:00Z"));
        assert_eq!(next("0 0 1,15 * *", "UTC", "2026-01-02T00:00:00Z").as_deref(), Some("2026-01-15T00:00:00Z"));
        assert_eq!(next("*/15 * * * *", "UTC", "2026-01-01T10:07:00Z").as_deref(), Some("2026-01-01T10:15:00Z"));
        assert_eq!(next("* * * * *", "UTC", "2026-01-01T10:07:30Z").as_deref(), Some("2026-01-01T10:08:00Z"));
    }

    #[test]
    fn a_time_zone_moves_the_instant_and_both_day_fields_restricted_match_either() {
        assert_eq!(next("0 9 * * *", "Europe/Berlin", "2026-01-01T10:00:00Z").as_deref(), Some("2026-01-02T08:00:00Z"));
        // The 13th (a Tuesday in 2026-01) or any Friday: Friday the 2nd first.
        assert_eq!(next("0 0 13 * 5", "UTC", "2026-01-01T00:00:00Z").as_deref(), Some("2026-01-02T00:00:00Z"));
        assert_eq!(next("0 0 13 * 7", "UTC", "2026-01-11T12:00:00Z").as_deref(), Some("2026-01-13T00:00:00Z"));
        assert_eq!(next("0 0 29 2 *", "UTC", "2026-03-01T00:00:00Z").as_deref(), Some("2028-02-29T00:00:00Z"));
    }

    #[test]
    fn a_skipped_local_minute_has_no_occurrence_and_a_repeated_one_occurs_twice() {
        // Europe/Berlin: 2026-03-29 02:00 local does not exist.
        assert_eq!(next("30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z").as_deref(), Some("2026-03-30T00:30:00Z"));
        // 2026-10-25 02:30 local happens at 00:30Z (+02) and 01:30Z (+01).
        assert_eq!(next("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z").as_deref(), Some("2026-10-25T00:30:00Z"));
        assert_eq!(next("30 2 * * *", "Europe/Berlin", "2026-10-25T00:30:00Z").as_deref(), Some("2026-10-25T01:30:00Z"));
    }

    #[test]
    fn what_ahp_does_not_have_is_refused_naming_the_field() {
        for (expr, says) in [
            ("* * * *", "five fields"),
            ("0 0 * * * *", "five fields"),
            ("@daily", "five fields"),
            ("60 * * * *", "minute"),
            ("0 24 * * *", "hour"),
            ("0 0 ? * *", "day of month"),
            ("0 0 L * *", "day of month"),
            ("0 0 * 13 *", "month"),
            ("0 0 * * 1#2", "day of week"),
            ("*/0 * * * *", "minute"),
            ("5/15 * * * *", "minute"),
            ("5-1 * * * *", "minute"),
        ] {
            let e = Schedule::parse(expr, "UTC").err().unwrap_or_else(|| panic!("{expr} was accepted"));
            assert!(e.contains(says), "{expr}: {e}");
        }
        assert!(Schedule::parse("0 0 * * *", "Mars/Olympus").err().is_some_and(|e| e.contains("timeZone")));
        assert!(Schedule::parse("0 0 31 2 *", "UTC").is_ok_and(|s| s.next_after(0).is_none()));
        assert!(Schedule::parse("0 9 * jan-MAR sun,Sat", "utc").is_ok());
    }
}
