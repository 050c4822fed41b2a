//! The compact step log (VOPR's short log): one columnar line per step,
//! kept in a ring buffer for failure reports, optionally kept whole for
//! `target/sim-failures/<seed>.log`. Logging never draws randomness.

use std::collections::VecDeque;

/// Lines kept for a failure report.
pub const RING_LINES: usize = 50;

/// The step log.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    ring: VecDeque<String>,
    full: Option<Vec<String>>,
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

    /// Records one step.
    #[allow(clippy::too_many_arguments)]
    pub fn step(&mut self, step: u64, mono_ms: u64, input: &str, session: &str, before: &str, after: &str, effects: usize) {
        let input: String = input.chars().take(26).collect();
        let session = session.strip_prefix("ahp-session:/").unwrap_or(session);
        let phase = if before == after { before.to_owned() } else { format!("{before}->{after}") };
        self.line(format!("{step:>7} {mono_ms:>9} {input:<26} {session:<20} {phase:<21} {effects:>3}"));
    }

    /// Records a free-form line (crashes, phase changes, faults).
    pub fn note(&mut self, step: u64, mono_ms: u64, text: &str) {
        self.line(format!("{step:>7} {mono_ms:>9} ** {text}"));
    }

    fn line(&mut self, line: String) {
        if let Some(full) = &mut self.full {
            full.push(line.clone());
        }
        self.ring.push_back(line);
        while self.ring.len() > RING_LINES {
            self.ring.pop_front();
        }
    }

    /// The last lines, oldest first.
    pub fn last(&self) -> Vec<String> {
        self.ring.iter().cloned().collect()
    }

    /// Every line, when kept.
    pub fn all(&self) -> Option<&[String]> {
        self.full.as_deref()
    }
}
