//! The catalogue: what `listSessions` answers from, in order, in pages
//! (Sessions page, "Finding one").

use std::collections::BTreeMap;

use ahp_types::commands::{ListSessionsParams, ListSessionsResult};
use ahp_types::messages::JsonRpcError;
use ahp_types::Uri;

use crate::config::Config;
use crate::cursor::{self, RowKey};
use crate::protocol::error::{error, INVALID_PARAMS};
use crate::session::Session;

/// One page and whether an unlimited listing was cut at the default cap.
#[derive(Debug, Clone, PartialEq)]
pub struct Listing {
    /// The page to answer.
    pub page: ListSessionsResult,
    /// True when no limit was named and the catalogue held more rows than
    /// `list_default_max` (written to the log: the one case a client cannot
    /// see for itself).
    pub overflowed: bool,
}

fn key_of(session: &Session) -> RowKey {
    RowKey { modified_ms: session.modified_at.0, uri: session.record.resource.clone() }
}

/// Whether row `a` sorts before row `b`: newer first, then URI ascending.
pub fn sorts_before(a: &RowKey, b: &RowKey) -> bool {
    (std::cmp::Reverse(a.modified_ms), &a.uri) < (std::cmp::Reverse(b.modified_ms), &b.uri)
}

/// Answers one `listSessions` call.
///
/// Errors (-32602): a limit below 1, a cursor this host did not issue.
///
/// `owner`: `Some(principal)` keeps only the rows whose owner is that
/// principal (`_meta: {"ahpd.owner": "me"}`), before the cursor and the
/// limit apply, so a page is a page of the caller's own; `Some(None)` (a
/// connection with no principal) keeps nothing.
pub fn list(
    sessions: &BTreeMap<Uri, Session>,
    params: &ListSessionsParams,
    config: &Config,
    owner: Option<&Option<String>>,
) -> Result<Listing, JsonRpcError> {
    let limit = match params.limit {
        None => config.list_default_max,
        Some(n) if n < 1 => return Err(error(INVALID_PARAMS, "limit must be at least 1")),
        Some(n) => (n as u64).min(config.list_limit_max as u64) as usize,
    };
    let after = match params.cursor.as_deref() {
        None => None,
        Some(text) => match cursor::decode(text, &config.cursor_secret) {
            Some(row) => Some(row),
            None => return Err(error(INVALID_PARAMS, "unknown cursor: it was not issued by this host")),
        },
    };
    let mut rows: Vec<(RowKey, &Session)> = sessions
        .values()
        .filter(|s| s.announced)
        .filter(|s| match owner {
            None => true,
            Some(None) => false,
            Some(Some(me)) => s.record.owner.as_deref() == Some(me.as_str()),
        })
        .map(|s| (key_of(s), s))
        .filter(|(k, _)| after.as_ref().is_none_or(|a| sorts_before(a, k)))
        .collect();
    rows.sort_by(|(a, _), (b, _)| (std::cmp::Reverse(a.modified_ms), &a.uri).cmp(&(std::cmp::Reverse(b.modified_ms), &b.uri)));
    let more = rows.len() > limit;
    rows.truncate(limit);
    let next_cursor = if more { rows.last().map(|(k, _)| cursor::encode(k, &config.cursor_secret)) } else { None };
    let overflowed = more && params.limit.is_none();
    let items = rows.into_iter().map(|(_, s)| s.summary()).collect();
    Ok(Listing { page: ListSessionsResult { next_cursor, items }, overflowed })
}
