//! The compact step log (VOPR's short log): one columnar line per step,
//! kept in a ring buffer for failure reports, optionally kept whole for
//! `target/sim-failures/<seed>.log`. Logging never draws randomness.
//!
//! Steps are kept as their raw fields and written out only when lines are
//! read: every step is recorded, few runs ever read a line.

use std::collections::VecDeque;

/// Lines kept for a failure report.
pub const RING_LINES: usize = 50;

/// One recorded line, not yet formatted.
#[derive(Debug, Clone)]
enum Entry {
    /// A step (see [`Trace::step`]).
    Step {
        step: u64,
        mono_ms: u64,
        input: String,
        session: Option<String>,
        before: &'static str,
        after: &'static str,
        effects: usize,
    },
    /// A free-form line (see [`Trace::note`]).
    Note { step: u64, mono_ms: u64, text: String },
}

impl Entry {
    fn line(&self) -> String {
        match self {
            Entry::Step { step, mono_ms, input, session, before, after, effects } => {
                let input: String = input.chars().take(26).collect();
                let session = session.as_deref().unwrap_or("-");
                let session = session.strip_prefix("ahp-session:/").unwrap_or(session);
                let phase = if before == after { (*before).to_owned() } else { format!("{before}->{after}") };
                format!("{step:>7} {mono_ms:>9} {input:<26} {session:<20} {phase:<21} {effects:>3}")
            }
            Entry::Note { step, mono_ms, text } => format!("{step:>7} {mono_ms:>9} ** {text}"),
        }
    }
}

/// The step log.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// The last [`RING_LINES`] entries (unused when every entry is kept).
    ring: VecDeque<Entry>,
    full: Option<Vec<Entry>>,
}

impl Trace {
    /// A trace that keeps only the last [`RING_LINES`] lines, or every line
    /// when `keep_all`.
    pub fn new(keep_all: bool) -> Trace {
        Trace { ring: VecDeque::with_capacity(RING_LINES + 1), full: keep_all.then(Vec::new) }
    }

    /// The column header.
    pub fn header() -> String {
        format!("{:>7} {:>9} {:<26} {:<20} {:<21} {:>3}", "step", "mono_ms", "input", "session", "phase", "fx")
    }

    /// Records one step: its input's label (cut to 26 characters when
    /// written), the session it was about (`None`: written `-`), that
    /// session's phase before and after, and how many effects it had.
    #[allow(clippy::too_many_arguments)]
    pub fn step(&mut self, step: u64, mono_ms: u64, input: String, session: Option<String>, before: &'static str, after: &'static str, effects: usize) {
        self.push(Entry::Step { step, mono_ms, input, session, before, after, effects });
    }

    /// Records a free-form line (crashes, phase changes, faults).
    pub fn note(&mut self, step: u64, mono_ms: u64, text: &str) {
        self.push(Entry::Note { step, mono_ms, text: text.to_owned() });
    }

    fn push(&mut self, entry: Entry) {
        // The whole log's tail is the ring: no second copy.
        if let Some(full) = &mut self.full {
            full.push(entry);
            return;
        }
        self.ring.push_back(entry);
        while self.ring.len() > RING_LINES {
            self.ring.pop_front();
        }
    }

    /// The last lines, oldest first.
    pub fn last(&self) -> Vec<String> {
        match &self.full {
            Some(full) => full[full.len().saturating_sub(RING_LINES)..].iter().map(Entry::line).collect(),
            None => self.ring.iter().map(Entry::line).collect(),
        }
    }

    /// Every line, when kept.
    pub fn all(&self) -> Option<Vec<String>> {
        self.full.as_ref().map(|full| full.iter().map(Entry::line).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(keep_all: bool) -> Trace {
        let mut t = Trace::new(keep_all);
        for i in 0..120u64 {
            if i % 7 == 0 {
                t.note(i, i * 10, &format!("note {i}"));
            } else {
                let session = (i % 3 != 0).then(|| format!("ahp-session:/s{i}"));
                t.step(i, i * 10, format!("frame c1 chat/turnStarted ahp-chat:/ahp-session@s{i}"), session, "live", if i % 2 == 0 { "live" } else { "asleep" }, 2);
            }
        }
        t
    }

    #[test]
    fn lines_are_written_as_before() {
        let t = filled(false);
        let last = t.last();
        assert_eq!(last.len(), RING_LINES);
        let step = |i: u64, session: &str, phase: &str| format!("{i:>7} {:>9} {:<26} {session:<20} {phase:<21} {:>3}", i * 10, "frame c1 chat/turnStarted", 2);
        assert_eq!(last[0], format!("{:>7} {:>9} ** note 70", 70, 700));
        assert_eq!(last[1], step(71, "s71", "live->asleep"));
        assert_eq!(last[2], step(72, "-", "live"));
        assert_eq!(last[48], step(118, "s118", "live"));
        assert_eq!(last[49], format!("{:>7} {:>9} ** note 119", 119, 1190));
    }

    #[test]
    fn a_kept_log_ends_with_the_ring() {
        let (ring, full) = (filled(false), filled(true));
        assert_eq!(ring.all(), None);
        let all = full.all().expect("kept");
        assert_eq!(all.len(), 120);
        assert_eq!(full.last(), ring.last());
        assert_eq!(all[120 - RING_LINES..], ring.last()[..]);
    }
}
