//! A fixed range of seeds through the whole simulation (safety phase with
//! faults, then liveness), split into chunks so the test harness runs them
//! in parallel. Any failure panics with its seed, rule, trace and the exact
//! replay command (`cargo run -p sim -- --seed <N>`).

use sim::{run_seed, RunConfig};

/// Seeds per chunk; chunks cover `0..CHUNKS * CHUNK`.
const CHUNK: u64 = 250;

fn run_chunk(index: u64) {
    let mut sleeps = 0;
    let mut wakes = 0;
    for seed in index * CHUNK..(index + 1) * CHUNK {
        match run_seed(seed, RunConfig::default()) {
            Ok(summary) => {
                sleeps += summary.stats.sleeps;
                wakes += summary.stats.wakes;
            }
            Err(failure) => panic!("seed {seed} failed; replay with `{}`\n{failure}", failure.replay_command()),
        }
    }
    // The swarm must exercise the rules it checks.
    assert!(sleeps > 0 && wakes > 0, "chunk {index}: no sleeps ({sleeps}) or wakes ({wakes}): the options no longer reach them");
}

#[test]
fn seeds_0000_0249() {
    run_chunk(0);
}

#[test]
fn seeds_0250_0499() {
    run_chunk(1);
}

#[test]
fn seeds_0500_0749() {
    run_chunk(2);
}

#[test]
fn seeds_0750_0999() {
    run_chunk(3);
}

#[test]
fn seeds_1000_1249() {
    run_chunk(4);
}

#[test]
fn seeds_1250_1499() {
    run_chunk(5);
}

#[test]
fn seeds_1500_1749() {
    run_chunk(6);
}

#[test]
fn seeds_1750_1999() {
    run_chunk(7);
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
        assert_ne!(a.hash, 0);
    }
    let x = run_seed(7, run).unwrap_or_else(|f| panic!("{f}"));
    let y = run_seed(8, run).unwrap_or_else(|f| panic!("{f}"));
    assert_ne!(x.hash, y.hash);
}
