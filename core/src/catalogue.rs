//! The catalogue: what `listSessions` answers from, in order, in pages
//! (Sessions page, "Finding one").

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use ahp_types::commands::ListSessionsParams;
use ahp_types::messages::JsonRpcError;
use ahp_types::Uri;

use crate::config::Config;
use crate::cursor::{self, RowKey};
use crate::protocol::error::{error, INVALID_PARAMS};
use crate::session::row::PageRef;
use crate::session::table::{SessionTable, SharedUri, Slot};
use crate::session::Session;

/// One page and whether an unlimited listing was cut at the default cap.
#[derive(Debug, Clone)]
pub struct Listing {
    /// The page to answer: a `ListSessionsResult`, already encoded as JSON
    /// text straight from the sessions (see `session::row`).
    pub page: Box<serde_json::value::RawValue>,
    /// How many rows the page holds.
    pub rows: usize,
    /// True when no limit was named and the catalogue held more rows than
    /// `list_default_max` (written to the log: the one case a client cannot
    /// see for itself).
    pub overflowed: bool,
    /// External sessions the `showExternalSessions` mode hid from the rows
    /// this page walked (written to the log).
    pub hidden_external: usize,
}

/// The catalogue's order, kept as sessions are announced, move and go:
/// most recently modified first, then URI ascending. Paging walks it from a
/// cursor in O(log n + page) rather than sorting the catalogue per call.
///
/// The external rows are also kept in an order of their own, so the
/// `recent` mode's "two updated most recently" is read in O(log n) instead
/// of a walk over every session (a scan merging 100k rows asks it per row).
///
/// Each row's URI is the session table's own [`SharedUri`], not a copy
/// (issue 21: memory per catalogue row).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Index {
    rows: BTreeMap<(Reverse<i64>, SharedUri), Slot>,
    externals: BTreeSet<(Reverse<i64>, SharedUri)>,
}

/// The key of row `uri` at `ms`, to look a row up by (an allocation of
/// its own: only for the rare lookups, never kept).
fn key(ms: i64, uri: &str) -> (Reverse<i64>, SharedUri) {
    (Reverse(ms), SharedUri::from(uri))
}

impl Index {
    /// Rebuilds the order from its sorted entries, so its B-tree nodes are
    /// full (see `SessionTable::repack`). Same rows, same order.
    pub fn repack(&mut self) {
        self.rows = std::mem::take(&mut self.rows).into_iter().collect();
        self.externals = std::mem::take(&mut self.externals).into_iter().collect();
    }

    /// Adds an announced session's row at `modified_ms`, kept beside the
    /// session's `slot` in the host's table; `uri` is the table's own
    /// ([`SessionTable::shared_uri`]); `external` marks a session a CLI
    /// wrote outside this host.
    pub fn insert(&mut self, modified_ms: i64, uri: SharedUri, slot: Slot, external: bool) {
        if external {
            self.externals.insert((Reverse(modified_ms), uri.clone()));
        }
        self.rows.insert((Reverse(modified_ms), uri), slot);
    }

    /// Removes a row.
    pub fn remove(&mut self, modified_ms: i64, uri: &str) {
        let key = key(modified_ms, uri);
        self.rows.remove(&key);
        self.externals.remove(&key);
    }

    /// Moves a row when its `modifiedAt` moved (the URI it keeps stays the
    /// one it was given).
    pub fn moved(&mut self, from_ms: i64, to_ms: i64, uri: &str) {
        if from_ms == to_ms {
            return;
        }
        let from = key(from_ms, uri);
        if let Some(((_, kept), slot)) = self.rows.remove_entry(&from) {
            self.rows.insert((Reverse(to_ms), kept), slot);
        }
        if let Some((_, kept)) = self.externals.take(&from) {
            self.externals.insert((Reverse(to_ms), kept));
        }
    }

    /// An external row became the host's own (adopted): it stays listed
    /// and leaves the external order.
    pub fn adopted(&mut self, modified_ms: i64, uri: &str) {
        self.externals.remove(&key(modified_ms, uri));
    }

    /// The external rows updated at or after `floor_ms`, newest first (ties
    /// by URI ascending), at most `n`.
    pub fn newest_externals(&self, floor_ms: i64, n: usize) -> Vec<(i64, Uri)> {
        self.externals
            .iter()
            .take_while(|(Reverse(ms), _)| *ms >= floor_ms)
            .take(n)
            .map(|(Reverse(ms), uri)| (*ms, uri.to_string()))
            .collect()
    }

    /// How many external rows.
    pub fn externals_len(&self) -> usize {
        self.externals.len()
    }

    /// How many rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The rows strictly after `after` (or from the top), in order.
    pub fn walk<'a>(&'a self, after: Option<&RowKey>) -> impl Iterator<Item = RowKey> + 'a {
        self.walk_borrowed(after).map(|(ms, uri, _)| RowKey { modified_ms: ms, uri: uri.to_owned() })
    }

    /// The same rows as [`Index::walk`], borrowed: `(modifiedAt ms, URI,
    /// slot)` with no URI copied (a page copies only its last row's, for
    /// the cursor) and the slot to read the session by.
    pub fn walk_borrowed<'a>(&'a self, after: Option<&RowKey>) -> impl Iterator<Item = (i64, &'a str, Slot)> + 'a {
        let start = match after {
            Some(k) => Bound::Excluded(key(k.modified_ms, &k.uri)),
            None => Bound::Unbounded,
        };
        self.rows.range((start, Bound::Unbounded)).map(|((Reverse(ms), uri), slot)| (*ms, &**uri, *slot))
    }
}

/// Whether row `a` sorts before row `b`: newer first, then URI ascending.
pub fn sorts_before(a: &RowKey, b: &RowKey) -> bool {
    (Reverse(a.modified_ms), &a.uri) < (Reverse(b.modified_ms), &b.uri)
}

/// Answers one `listSessions` call.
///
/// `owner`: `Some(principal)` keeps only the rows whose owner is that
/// principal (`_meta: {"ahpd.owner": "me"}`), before the cursor and the
/// limit apply, so a page is a page of the caller's own; `Some(None)` (a
/// connection with no principal) keeps nothing.
///
/// Errors (-32602): a limit below 1, a cursor this host did not issue;
/// (-32603) the page could not be encoded (not seen in practice).
pub fn list(
    index: &Index,
    sessions: &SessionTable,
    params: &ListSessionsParams,
    config: &Config,
    owner: Option<&Option<String>>,
    external: &crate::external::ExternalFilter,
) -> Result<Listing, JsonRpcError> {
    let limit = match params.limit {
        None => config.list_default_max,
        Some(n) if n < 1 => {
            crate::mark!("list_limit_below_one_refused");
            return Err(error(INVALID_PARAMS, "limit must be at least 1"));
        }
        Some(n) if n as u64 > config.list_limit_max as u64 => {
            // "A limit is capped at 500 however many were asked for."
            crate::mark!("list_limit_capped");
            config.list_limit_max
        }
        Some(n) => n as usize,
    };
    let after = match params.cursor.as_deref() {
        None => None,
        Some(text) => match cursor::decode(text, &config.cursor_secret) {
            Some(row) => Some(row),
            None => {
                // "one this host did not issue is refused with -32602".
                crate::mark!("list_cursor_refused");
                return Err(error(INVALID_PARAMS, "unknown cursor: it was not issued by this host"));
            }
        },
    };
    let mut rows: Vec<((i64, &Uri), &Session)> = Vec::with_capacity(limit.min(index.len()) + 1);
    let mut hidden = 0usize;
    for (ms, uri, slot) in index.walk_borrowed(after.as_ref()) {
        let Some(session) = sessions.at(slot, uri) else { continue };
        let key = (ms, &session.record().resource);
        if session.record().external && !external.shows(session.modified_at(), key.1) {
            crate::mark!("list_external_hidden");
            hidden += 1;
            continue;
        }
        let keep = match owner {
            None => true,
            Some(None) => {
                // "A connection with no principal owns nothing".
                crate::mark!("list_owner_filter_no_principal");
                false
            }
            Some(Some(me)) => session.record().owner.as_deref() == Some(me.as_str()),
        };
        if keep {
            rows.push((key, session));
            if rows.len() > limit {
                break;
            }
        }
    }
    let more = rows.len() > limit;
    if more {
        crate::mark!("list_page_has_next_cursor");
    }
    rows.truncate(limit);
    let next_cursor = if more {
        rows.last().map(|((ms, uri), _)| cursor::encode(&RowKey { modified_ms: *ms, uri: (*uri).clone() }, &config.cursor_secret))
    } else {
        None
    };
    let overflowed = more && params.limit.is_none();
    let count = rows.len();
    let page = PageRef { next_cursor, items: rows.into_iter().map(|(_, s)| s.row()).collect() };
    let page = serde_json::value::to_raw_value(&page)
        .map_err(|e| error(crate::protocol::error::INTERNAL_ERROR, format!("the page could not be encoded: {e}")))?;
    Ok(Listing { page, rows: count, overflowed, hidden_external: hidden })
}
