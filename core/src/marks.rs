//! Coverage marks (TigerBeetle style): `mark!("name")` on every branch
//! that decides a rule of the Sessions page, so that a simulation run can
//! say which decisions its seeds took and a test can fail when a listed
//! one is no longer reached (`sim/src/marks.rs` lists them).
//!
//! Without core's cargo feature `sim` the macro expands to nothing: the
//! daemon (`cargo build -p ahpd`) pays nothing for it. With the feature
//! each hit adds one to a per-thread count by name, since the simulator
//! runs seeds on several threads at once; the simulator takes the counts
//! with [`take`] at the start and end of each seed.

#[cfg(feature = "sim")]
use std::cell::RefCell;
#[cfg(feature = "sim")]
use std::collections::BTreeMap;

#[cfg(feature = "sim")]
thread_local! {
    static HITS: RefCell<BTreeMap<&'static str, u64>> = const { RefCell::new(BTreeMap::new()) };
}

/// Notes one pass through the branch `name` on this thread (a count, not
/// a time). Called by [`mark!`](crate::mark); only with the `sim` feature.
#[cfg(feature = "sim")]
pub fn hit(name: &'static str) {
    HITS.with(|h| *h.borrow_mut().entry(name).or_default() += 1);
}

/// The counts this thread has noted since the last call, by mark name,
/// and a fresh start. Only with the `sim` feature.
#[cfg(feature = "sim")]
pub fn take() -> BTreeMap<&'static str, u64> {
    HITS.with(|h| std::mem::take(&mut *h.borrow_mut()))
}

/// Marks a decision point: `mark!("sleep_refused_watched");`. Compiles to
/// nothing unless ahpd-core's `sim` feature is on (see the module docs).
#[macro_export]
macro_rules! mark {
    ($name:literal) => {{
        #[cfg(feature = "sim")]
        $crate::marks::hit($name);
        // Nothing runs; the name keeps two marked branches from reading
        // as identical blocks to clippy.
        #[cfg(not(feature = "sim"))]
        let _ = $name;
    }};
}
