//! A range of seeds on every core: `std::thread::scope` workers take the
//! next seed from one shared counter (work stealing: a slow seed holds up
//! one thread, not a chunk), and the results come back in seed order, so
//! a range run prints the same whatever the thread count.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::world::add_stats;
use crate::{run_seed, Failure, RunConfig, Summary};

/// What went wrong with one seed.
#[derive(Debug, Clone)]
pub enum SeedError {
    /// A broken rule.
    Failed(Box<Failure>),
    /// Two runs of the seed differed (`--check-determinism`): the text says how.
    Nondeterministic(String),
}

/// The outcome of a range run.
#[derive(Debug, Clone, Default)]
pub struct RangeReport {
    /// Seeds run.
    pub seeds: u64,
    /// Every failing seed, in seed order.
    pub failures: Vec<(u64, SeedError)>,
    /// The totals summed over the passing seeds (`seed` and `hash` are
    /// left 0; host counters added, `marks` and `log_events` summed by
    /// name).
    pub summed: Summary,
    /// The seed's own summary, when the range is one passing seed.
    pub only: Option<Summary>,
}

/// The threads a range run uses: every core the OS gives this process.
pub fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Runs seeds `first..end` on `threads` threads. With `determinism` each
/// seed runs twice and must give the same hash and step count.
pub fn run_range(first: u64, end: u64, run: RunConfig, determinism: bool, threads: usize) -> RangeReport {
    let next = AtomicU64::new(first);
    let report = Mutex::new(RangeReport { seeds: end.saturating_sub(first), ..RangeReport::default() });
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| {
                let mut local = RangeReport::default();
                loop {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= end {
                        break;
                    }
                    match run_seed(seed, run) {
                        Ok(summary) => {
                            if determinism {
                                match run_seed(seed, run) {
                                    Ok(again) if again.hash == summary.hash && again.steps == summary.steps => {}
                                    Ok(again) => local.failures.push((seed, SeedError::Nondeterministic(format!(
                                        "hash {:016x} vs {:016x}, steps {} vs {}",
                                        summary.hash, again.hash, summary.steps, again.steps
                                    )))),
                                    Err(f) => local.failures.push((seed, SeedError::Nondeterministic(format!("the second run failed:\n{f}")))),
                                }
                            }
                            add_summary(&mut local.summed, &summary);
                            if end - first == 1 {
                                local.only = Some(summary);
                            }
                        }
                        Err(failure) => local.failures.push((seed, SeedError::Failed(Box::new(failure)))),
                    }
                }
                let mut all = report.lock().unwrap_or_else(|e| e.into_inner());
                add_summary(&mut all.summed, &local.summed);
                all.failures.extend(local.failures);
                if local.only.is_some() {
                    all.only = local.only;
                }
            });
        }
    });
    let mut report = report.into_inner().unwrap_or_else(|e| e.into_inner());
    report.failures.sort_by_key(|(seed, _)| *seed);
    report
}

/// Adds `b`'s totals into `a` (counts summed, marks and log events by name).
pub fn add_summary(a: &mut Summary, b: &Summary) {
    a.steps += b.steps;
    a.sim_ms += b.sim_ms;
    add_stats(&mut a.stats, &b.stats);
    a.crashes += b.crashes;
    a.turns_completed += b.turns_completed;
    a.requests += b.requests;
    a.applied += b.applied;
    a.walks += b.walks;
    a.mirror_checks += b.mirror_checks;
    add_counts(&mut a.log_events, &b.log_events);
    add_counts(&mut a.marks, &b.marks);
}

fn add_counts(a: &mut BTreeMap<&'static str, u64>, b: &BTreeMap<&'static str, u64>) {
    for (k, n) in b {
        *a.entry(k).or_default() += n;
    }
}
