//! `cargo run -p sim -- [--seed N | --seeds A..B] [--steps-max N]
//! [--check-determinism] [--verify-incremental]`
//!
//! Runs seeds through the simulated world and prints, for each failure, the
//! rule, seed, step, sim time, options, the last trace lines and the replay
//! command (the full trace goes to `target/sim-failures/<seed>.log`). A
//! range run ends with the host counters summed over every seed, so one can
//! see the sleep, eviction and wake rules were exercised.
//!
//! Exit codes: 0 all passed, 1 correctness, 2 liveness, 3 core panic,
//! 4 nondeterminism, 64 usage.

/// The sim allocates and frees small values at a high rate (frames, states,
/// effects): mimalloc runs a range 15-25% faster than the system allocator
/// on this 2-core machine (paired runs in docs/SIMULATION.md). The core and
/// the daemon do not use it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

use sim::range::SeedError;
use sim::{Failure, Options, RunConfig, Summary, World};

struct Args {
    seeds: Option<(u64, u64)>,
    steps_max: Option<u64>,
    check_determinism: bool,
    /// `--trace`: write a single seed's full trace even when it passes.
    trace: bool,
    /// `--verify-incremental`: check the incremental checks against whole
    /// ones after every step (`RunConfig::verify_incremental`).
    verify_incremental: bool,
}

fn usage() -> ExitCode {
    eprintln!("usage: sim [--seed N|HEX40 [--trace]] [--seeds A..B] [--steps-max N] [--check-determinism] [--verify-incremental]");
    ExitCode::from(64)
}

/// A seed in decimal, or a 40-hex commit hash folded to its first 64 bits.
fn parse_seed(text: &str) -> Option<u64> {
    if let Ok(n) = text.parse::<u64>() {
        return Some(n);
    }
    if text.len() == 40 && text.chars().all(|c| c.is_ascii_hexdigit()) {
        return u64::from_str_radix(&text[..16], 16).ok();
    }
    None
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args { seeds: None, steps_max: None, check_determinism: false, trace: false, verify_incremental: false };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--seed" => {
                let v = it.next().ok_or("--seed needs a value")?;
                let s = parse_seed(&v).ok_or(format!("bad seed {v}"))?;
                args.seeds = Some((s, s + 1));
            }
            "--seeds" => {
                let v = it.next().ok_or("--seeds needs A..B")?;
                let (a, b) = v.split_once("..").ok_or("--seeds needs A..B")?;
                let a = a.parse::<u64>().map_err(|e| e.to_string())?;
                let b = b.parse::<u64>().map_err(|e| e.to_string())?;
                if b <= a {
                    return Err("--seeds A..B needs A < B".into());
                }
                args.seeds = Some((a, b));
            }
            "--steps-max" => {
                let v = it.next().ok_or("--steps-max needs a value")?;
                args.steps_max = Some(v.parse().map_err(|_| format!("bad step count {v}"))?);
            }
            "--check-determinism" => args.check_determinism = true,
            "--trace" => args.trace = true,
            "--verify-incremental" => args.verify_incremental = true,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

/// A seed from the OS, used only when none was given (printed first).
fn entropy_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.write_u32(std::process::id());
    h.finish()
}

fn exit_for(f: &Failure) -> u8 {
    match f.class() {
        "crash" => 3,
        "liveness" => 2,
        _ => 1,
    }
}

/// Re-runs a failing seed keeping every trace line and writes them to
/// `target/sim-failures/<seed>.log`.
fn write_full_trace(seed: u64, run: RunConfig, failure: &Failure) {
    write_trace("sim-failures", seed, run, Some(failure));
}

/// Re-runs `seed` keeping every trace line and writes them to
/// `target/<dir>/<seed>.log`, ending with `failure` when there is one.
fn write_trace(dir: &str, seed: u64, run: RunConfig, failure: Option<&Failure>) {
    let mut world = World::new(seed, RunConfig { keep_trace: true, ..run });
    let _ = world.run();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target").join(dir);
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    let path = dir.join(format!("{seed}.log"));
    if let Ok(mut f) = std::fs::File::create(&path) {
        let _ = writeln!(f, "{}", Options::from_seed(seed));
        let _ = writeln!(f, "{}", sim::trace::Trace::header());
        for line in world.trace().all().unwrap_or_default() {
            let _ = writeln!(f, "{line}");
        }
        if let Some(failure) = failure {
            let _ = writeln!(f, "{failure}");
        }
        eprintln!("full trace: {}", path.display());
    }
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return usage();
        }
    };
    let (first, end) = match args.seeds {
        Some(r) => r,
        None => {
            let s = entropy_seed();
            println!("seed: {s}");
            (s, s.wrapping_add(1).max(s))
        }
    };
    let end = if end == first { first + 1 } else { end };
    let single = end - first == 1;
    let run = RunConfig { keep_trace: false, hash: args.check_determinism, safety_steps: args.steps_max, verify_incremental: args.verify_incremental };
    let started = Instant::now();
    let mut exit = 0u8;
    let summed: Summary;
    let failures: u64;
    if single {
        println!("seed: {first}");
        println!("{}", Options::from_seed(first));
    }
    // Every core: seeds in parallel, results in seed order.
    let threads = if single { 1 } else { sim::range::threads() };
    let report = sim::range::run_range(first, end, run, args.check_determinism, threads);
    if single && args.trace && report.failures.is_empty() {
        write_trace("sim-traces", first, run, None);
    }
    failures = report.failures.len() as u64;
    for (seed, error) in &report.failures {
        match error {
            SeedError::Failed(failure) => {
                exit = exit.max(exit_for(failure));
                if !single {
                    println!("seed: {seed}");
                }
                println!("{failure}");
                write_full_trace(*seed, run, failure);
            }
            SeedError::Nondeterministic(how) => {
                eprintln!("NONDETERMINISM at seed {seed}: {how}\nreplay: cargo run -p sim -- --seed {seed} --check-determinism");
                exit = exit.max(4);
            }
        }
    }
    summed = report.summed.clone();
    let totals = summed.stats.clone();
    if single {
        if let Some(summary) = &report.only {
            println!(
                "ok: {} steps, {} ms sim time, {} crashes, {} turns, hash {:016x}",
                summary.steps, summary.sim_ms, summary.crashes, summary.turns_completed, summary.hash
            );
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let seeds = end - first;
    println!(
        "{seeds} seeds, {failures} failed, {:.1} s on {threads} threads, {:.0} schedules/minute, {} steps, {} sim s",
        elapsed,
        seeds as f64 / elapsed.max(1e-9) * 60.0,
        summed.steps,
        summed.sim_ms / 1000
    );
    println!(
        "totals: sleeps={} evictions={} wakes={} failed_resumes={} stale_ops={} stale_events={} rejections={} crashes={} turns={} requests={} envelopes_applied={} walks={} mirrors_compared={}",
        totals.sleeps,
        totals.evictions,
        totals.wakes,
        totals.failed_resumes,
        totals.stale_ops,
        totals.stale_events,
        totals.rejections,
        summed.crashes,
        summed.turns_completed,
        summed.requests,
        summed.applied,
        summed.walks,
        summed.mirror_checks
    );
    let events: Vec<String> = summed.log_events.iter().map(|(e, n)| format!("{e}={n}")).collect();
    println!("host log events: {}", events.join(" "));
    let hit: Vec<String> = summed.marks.iter().map(|(m, n)| format!("{m}={n}")).collect();
    println!("marks hit ({}): {}", summed.marks.len(), hit.join(" "));
    let missed: Vec<&str> = sim::marks::EXPECTED.iter().copied().filter(|m| !summed.marks.contains_key(m)).collect();
    let pending: Vec<&str> = sim::marks::EXPECTED_PENDING.iter().copied().filter(|m| !summed.marks.contains_key(m)).collect();
    println!("expected marks missed ({}): {}", missed.len(), missed.join(" "));
    println!("pending marks not hit ({}): {}", pending.len(), pending.join(" "));
    ExitCode::from(exit)
}
