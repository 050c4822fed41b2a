//! The residency limit's recency order (Sessions page, "Sleep and wake":
//! the least recently used session goes first), as a pure piece the host
//! and the model tests share.
//!
//! Each use of a session takes a fresh stamp from one increasing counter
//! (`Host::touch`); the least recently used of a set of candidates is the
//! one with the smallest stamp, ties (sessions never used since this
//! process started, all stamped 0) broken by the smaller key.

/// The least recently used of `candidates`, given as `(key, stamp)` pairs:
/// the smallest stamp, then the smallest key; `None` when there are none.
/// Stamps are counts of uses (unitless, increasing), not times.
pub fn least_recent<'a, K: Ord + ?Sized + 'a>(candidates: impl IntoIterator<Item = (&'a K, u64)>) -> Option<&'a K> {
    candidates.into_iter().min_by(|(ka, a), (kb, b)| (a, ka).cmp(&(b, kb))).map(|(k, _)| k)
}
