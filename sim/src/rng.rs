//! The simulator's randomness: the run seed split into independent
//! SplitMix64 streams (docs/STYLE.md 3.4), so drawing more from one stream
//! (say, a new fault kind) never shifts the values another stream yields.

use ahpd_core::rng::Rng;

/// Which independent stream a draw comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Swarm options, drawn once before step 1.
    Options = 1,
    /// What clients decide to do.
    Workload = 2,
    /// Whether and when faults strike.
    Faults = 3,
    /// Latencies and the simulated backend's behaviour.
    World = 4,
    /// Seeds handed to `Host::new` (first start and every restart).
    Core = 5,
    /// The host tool calls the simulated agents make (issue 24), apart
    /// from the world's stream so the other draws stay as they were.
    Tools = 6,
}

/// Mixes the run seed with a stream id into the stream's own seed.
fn stream_seed(seed: u64, stream: Stream) -> u64 {
    let mut r = Rng::new(seed ^ (stream as u64).wrapping_mul(0xA076_1D64_78BD_642F));
    r.next_u64()
}

/// One random stream with the helpers the simulator needs.
#[derive(Debug, Clone)]
pub struct SimRng {
    inner: Rng,
}

impl SimRng {
    /// The stream `stream` of run `seed`.
    pub fn new(seed: u64, stream: Stream) -> SimRng {
        SimRng { inner: Rng::new(stream_seed(seed, stream)) }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.inner.next_u64()
    }

    /// A value in `0..bound` (0 when `bound` is 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.inner.below(bound)
    }

    /// A value in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }

    /// A uniform value in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }

    /// An exponentially distributed delay with mean `mean_ms`, capped at 30
    /// times the mean so one draw cannot stall a run.
    pub fn exp_ms(&mut self, mean_ms: u64) -> u64 {
        if mean_ms == 0 {
            return 0;
        }
        let u = self.unit();
        let x = -(1.0 - u).ln() * mean_ms as f64;
        (x as u64).min(mean_ms.saturating_mul(30))
    }

    /// An index picked with the given weights (all zero → 0).
    pub fn weighted(&mut self, weights: &[u64]) -> usize {
        let total: u64 = weights.iter().sum();
        if total == 0 {
            return 0;
        }
        let mut x = self.below(total);
        for (i, w) in weights.iter().enumerate() {
            if x < *w {
                return i;
            }
            x -= w;
        }
        weights.len() - 1
    }

    /// One element of `items`, or `None` when empty.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() {
            None
        } else {
            items.get(self.below(items.len() as u64) as usize)
        }
    }
}

/// A 64-bit FNV-1a hasher for the determinism check (never std's
/// `RandomState`, which is seeded per process).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fnv(pub u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    /// Folds `bytes` into the hash.
    pub fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01B3);
        }
    }
}
