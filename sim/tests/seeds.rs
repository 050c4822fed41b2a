//! The CI seed range through the whole simulation (safety phase with
//! faults, then liveness), on every core (`sim::range`: one shared seed
//! counter, results in seed order). Any failure panics with its seed,
//! rule, trace and the exact replay command (`cargo run -p sim -- --seed
//! <N>`). The same range must hit every coverage mark `sim::marks`
//! expects.

use sim::range::{run_range, threads, SeedError};
use sim::{run_seed, RunConfig};

/// Seeds `0..SEEDS` run in CI.
const SEEDS: u64 = 2000;

#[test]
fn seeds_0000_1999_and_marks() {
    let report = run_range(0, SEEDS, RunConfig::default(), false, threads());
    if let Some((seed, error)) = report.failures.first() {
        match error {
            SeedError::Failed(failure) => panic!(
                "{} of {SEEDS} seeds failed; the first, seed {seed}: replay with `{}`\n{failure}",
                report.failures.len(),
                failure.replay_command()
            ),
            SeedError::Nondeterministic(how) => panic!("seed {seed} is not deterministic: {how}"),
        }
    }
    let stats = &report.summed.stats;
    // The swarm must exercise the rules it checks.
    assert!(stats.sleeps > 0 && stats.wakes > 0 && stats.evictions > 0, "no sleeps ({}), wakes ({}) or evictions ({}): the options no longer reach them", stats.sleeps, stats.wakes, stats.evictions);
    // A turn's end written durable-with-the-next (issue 21) must be lost
    // at some crash, so the restart checks judge the rebuild.
    let lost = report.summed.log_events.get("sim.store.with_next_lost_at_crash").copied().unwrap_or(0);
    assert!(lost > 0, "no crash took back a turn's end written with the next write: the options no longer reach it");
    let missed: Vec<&str> = sim::marks::EXPECTED.iter().copied().filter(|m| !report.summed.marks.contains_key(m)).collect();
    assert!(missed.is_empty(), "expected coverage marks not hit by seeds 0..{SEEDS}: {missed:?} (sim/src/marks.rs)");
}

/// Every listed mark is listed once and is one the core has: a name in
/// the lists but in no `mark!` of core/src would never be hit.
#[test]
fn mark_lists_name_marks_of_the_core() {
    let mut all: Vec<&str> = sim::marks::EXPECTED.iter().chain(sim::marks::EXPECTED_PENDING).copied().collect();
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n, "a mark is listed twice in sim/src/marks.rs");
    fn sources(dir: &std::path::Path, out: &mut String) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
            }
        }
    }
    let mut core = String::new();
    sources(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/src"), &mut core);
    let unknown: Vec<&str> = all.iter().copied().filter(|m| !core.contains(&format!("mark!(\"{m}\")"))).collect();
    assert!(unknown.is_empty(), "listed marks no mark! in core/src has: {unknown:?}");
}

/// The same seed twice gives the same rolling hash of every input and
/// effect (and different seeds differ).
#[test]
fn determinism() {
    let run = RunConfig { hash: true, ..RunConfig::default() };
    for seed in [1, 42, 4242] {
        let a = run_seed(seed, run).unwrap_or_else(|f| panic!("{f}"));
        let b = run_seed(seed, run).unwrap_or_else(|f| panic!("{f}"));
        assert_eq!((a.hash, a.steps), (b.hash, b.steps), "seed {seed} is not deterministic; replay with `cargo run -p sim -- --seed {seed} --check-determinism`");
        assert_eq!(a.marks, b.marks, "seed {seed} hit other marks on its second run");
        assert_ne!(a.hash, 0);
    }
    let x = run_seed(7, run).unwrap_or_else(|f| panic!("{f}"));
    let y = run_seed(8, run).unwrap_or_else(|f| panic!("{f}"));
    assert_ne!(x.hash, y.hash);
}

/// The incremental checks miss nothing: over a range, after every step,
/// every session the session table does not report touched equals its
/// copy from before the input, and every quiescent mirror equals the
/// host's state whether it was stale or not (`RunConfig::verify_incremental`).
#[test]
fn incremental_checks_agree_with_whole_ones() {
    let run = RunConfig { verify_incremental: true, ..RunConfig::default() };
    let report = run_range(5000, 5300, run, false, threads());
    if let Some((seed, error)) = report.failures.first() {
        match error {
            SeedError::Failed(failure) => panic!("seed {seed} failed with --verify-incremental: replay with `{} --verify-incremental`\n{failure}", failure.replay_command()),
            SeedError::Nondeterministic(how) => panic!("seed {seed} is not deterministic: {how}"),
        }
    }
    assert!(report.summed.steps > 100_000, "the range took {} steps: too few to say anything", report.summed.steps);
}
