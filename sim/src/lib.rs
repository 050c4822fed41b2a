//! # sim: a deterministic, seeded, VOPR-style simulation of `ahpd-core`
//!
//! A [`World`] is built from a seed: the seed picks the scenario (swarm
//! [`options::Options`]), and independent random streams drive the
//! workload, the faults and the latencies. Each [`World::step`] pops the
//! earliest pending event (or the host's deadline), calls
//! `Host::handle`, routes the effects to simulated clients, backend and
//! store, and runs every check: the core's state rules and the history
//! rules in [`checkers`]. A run is a safety phase with faults on, then a
//! liveness phase with faults off in which everything must settle.
//!
//! Any failure is a seed: `cargo run -p sim -- --seed <N>` replays it
//! bit for bit at the same commit.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod automations;
pub mod backend;
pub mod chat_move;
pub mod chat_shape;
pub mod checkers;
pub mod clients;
pub mod files;
pub mod marks;
pub mod git;
pub mod options;
pub mod pending;
pub mod queue;
pub mod questions;
pub mod range;
pub mod resume_move;
pub mod registry;
pub mod rng;
pub mod store;
pub mod trace;
pub mod users;
pub mod wire;
pub mod world;

use std::fmt;

pub use options::Options;
pub use world::{Progress, RunConfig, RunPhase, Summary, World};

/// A broken rule, with everything needed to replay it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The rule id, e.g. `rule3_mirror_matches_host` or `inv_live_is_resident`.
    pub rule: String,
    /// What was seen.
    pub detail: String,
    /// The seed.
    pub seed: u64,
    /// The step at which it was seen.
    pub step: u64,
    /// Simulated time, ms since the run began.
    pub sim_ms: u64,
    /// The swarm options, as printed before step 1.
    pub options: String,
    /// The last trace lines, oldest first.
    pub trace: Vec<String>,
}

impl Failure {
    /// The failure's class, for the exit code: a core panic, a liveness
    /// failure, or a correctness violation.
    pub fn class(&self) -> &'static str {
        match self.rule.as_str() {
            "core_panic" => "crash",
            "liveness_settles" => "liveness",
            _ => "correctness",
        }
    }

    /// The exact command that replays this failure.
    pub fn replay_command(&self) -> String {
        format!("cargo run -p sim -- --seed {}", self.seed)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "SIM FAILURE ({}): rule {} at seed {} step {} sim time {} ms", self.class(), self.rule, self.seed, self.step, self.sim_ms)?;
        writeln!(f, "  {}", self.detail)?;
        writeln!(f, "{}", self.options)?;
        writeln!(f, "last {} steps:", self.trace.len())?;
        writeln!(f, "{}", trace::Trace::header())?;
        for line in &self.trace {
            writeln!(f, "{line}")?;
        }
        write!(f, "replay: {}", self.replay_command())
    }
}

/// Runs one seed to the end.
pub fn run_seed(seed: u64, run: RunConfig) -> Result<Summary, Failure> {
    World::new(seed, run).run()
}
