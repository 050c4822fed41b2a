//! State rules, one pure function each, checked after every simulated step
//! (docs/STYLE.md 3.7). Each cites the sentence of the Sessions page it
//! enforces.

use ahp_types::state::SessionLifecycle;

use crate::host::HostView;
use crate::session::Phase;

/// A broken rule: its id and what was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The rule id, e.g. `inv_residency_within_limit`.
    pub rule: &'static str,
    /// What was seen.
    pub detail: String,
}

type Check = fn(&HostView<'_>) -> Result<(), Violation>;

/// Every state rule, by id.
pub const ALL: &[(&str, Check)] = &[
    ("inv_residency_within_limit", inv_residency_within_limit),
    ("inv_live_is_resident", inv_live_is_resident),
    ("inv_asleep_runs_no_turn", inv_asleep_runs_no_turn),
    ("inv_provisional_not_announced_ready", inv_provisional_not_announced_ready),
    ("inv_modified_not_before_created", inv_modified_not_before_created),
    ("inv_active_sessions_counts_turns", inv_active_sessions_counts_turns),
    ("inv_default_chat_exists", inv_default_chat_exists),
    ("inv_deadline_after_now", inv_deadline_after_now),
    ("inv_chat_index_consistent", inv_chat_index_consistent),
    ("inv_catalogue_lists_announced", inv_catalogue_lists_announced),
    ("inv_held_index_consistent", inv_held_index_consistent),
    ("inv_row_aggregate", inv_row_aggregate),
];

/// Runs every rule; the first violation wins.
pub fn check_all(view: &HostView<'_>) -> Result<(), Violation> {
    for (_, check) in ALL {
        check(view)?;
    }
    Ok(())
}

fn fail(rule: &'static str, detail: String) -> Result<(), Violation> {
    Err(Violation { rule, detail })
}

/// "The host keeps at most sessionResidencyLimit sessions resident ...
/// None goes while a client watches it or while it has work in hand."
/// Over the limit, every resident counted session must be pinned.
pub fn inv_residency_within_limit(view: &HostView<'_>) -> Result<(), Violation> {
    let limit = view.config.residency_limit;
    if limit == 0 {
        return Ok(());
    }
    let counted: Vec<_> = view.sessions.values().filter(|s| s.resident.is_some() && s.has_turns()).collect();
    if counted.len() <= limit {
        return Ok(());
    }
    let watched = |s: &crate::session::Session| view.conns.values().any(|c| c.watches(&s.record));
    let unpinned = counted
        .iter()
        .filter(|s| {
            // A session whose backend cannot resume it is pinned too: its
            // turns could not be rebuilt once its state went.
            matches!(s.phase, Phase::Live | Phase::Asleep)
                && s.can_resume
                && !s.has_work_in_hand()
                && !watched(s)
        })
        .count();
    if unpinned > 0 {
        return fail("inv_residency_within_limit", format!("{} resident over limit {limit} with {unpinned} evictable", counted.len()));
    }
    Ok(())
}

/// A live session holds an agent, and its state with it.
pub fn inv_live_is_resident(view: &HostView<'_>) -> Result<(), Violation> {
    for (uri, s) in view.sessions {
        if matches!(s.phase, Phase::Live | Phase::Starting { .. }) && s.resident.is_none() {
            return fail("inv_live_is_resident", format!("{uri} is {} without state", s.phase.name()));
        }
    }
    Ok(())
}

/// "A session sleeps with nothing running."
pub fn inv_asleep_runs_no_turn(view: &HostView<'_>) -> Result<(), Violation> {
    for (uri, s) in view.sessions {
        if s.phase == Phase::Asleep && (!s.sends_in_flight.is_empty() || s.busy) {
            return fail("inv_asleep_runs_no_turn", format!("{uri} asleep with work in hand"));
        }
    }
    Ok(())
}

/// "nothing announces it or lists it until its first turn": a session not
/// announced is still `creating`.
pub fn inv_provisional_not_announced_ready(view: &HostView<'_>) -> Result<(), Violation> {
    for (uri, s) in view.sessions {
        if !s.announced {
            if let Some(r) = &s.resident {
                if r.session.lifecycle != SessionLifecycle::Creating {
                    return fail("inv_provisional_not_announced_ready", format!("{uri} unannounced but not creating"));
                }
            }
        }
    }
    Ok(())
}

/// "createdAt is when the session was first started and never moves ...
/// modifiedAt ... moves forward only": modifiedAt is never before createdAt.
pub fn inv_modified_not_before_created(view: &HostView<'_>) -> Result<(), Violation> {
    for (uri, s) in view.sessions {
        if s.modified_at < s.created_at {
            return fail("inv_modified_not_before_created", format!("{uri} modified {} < created {}", s.modified_at.0, s.created_at.0));
        }
    }
    Ok(())
}

/// "that number counts the sessions running a turn".
pub fn inv_active_sessions_counts_turns(view: &HostView<'_>) -> Result<(), Violation> {
    let running = view.sessions.values().filter(|s| s.has_active_turn()).count() as i64;
    if view.root.active_sessions != Some(running) {
        return fail("inv_active_sessions_counts_turns", format!("root says {:?}, {running} running", view.root.active_sessions));
    }
    Ok(())
}

/// Every session has its default chat (Sessions page: "the session's
/// default chat is kept").
pub fn inv_default_chat_exists(view: &HostView<'_>) -> Result<(), Violation> {
    for (uri, s) in view.sessions {
        if !s.record.chats.iter().any(|c| c.resource == s.record.default_chat) {
            return fail("inv_default_chat_exists", format!("{uri} lost its default chat"));
        }
        if let Some(r) = &s.resident {
            if !r.chats.contains_key(&s.record.default_chat) {
                return fail("inv_default_chat_exists", format!("{uri} state lost its default chat"));
            }
        }
    }
    Ok(())
}

/// Deadlines are in the future once `handle` returns (what was due fired).
pub fn inv_deadline_after_now(view: &HostView<'_>) -> Result<(), Violation> {
    if let Some(d) = view.next_deadline {
        if d <= view.now.mono {
            return fail("inv_deadline_after_now", format!("deadline {} <= now {}", d.0, view.now.mono.0));
        }
    }
    Ok(())
}

/// Every chat of every session is indexed to it, and nothing else is.
pub fn inv_chat_index_consistent(view: &HostView<'_>) -> Result<(), Violation> {
    let mut count = 0;
    for (uri, s) in view.sessions {
        for c in &s.record.chats {
            count += 1;
            if view.chats.get(&c.resource) != Some(uri) {
                return fail("inv_chat_index_consistent", format!("chat {} not indexed to {uri}", c.resource));
            }
        }
    }
    if count != view.chats.len() {
        return fail("inv_chat_index_consistent", format!("{} indexed chats, {count} real", view.chats.len()));
    }
    Ok(())
}

/// "nothing announces it or lists it until its first turn": the catalogue
/// holds exactly the announced sessions, each at its current `modifiedAt`.
pub fn inv_catalogue_lists_announced(view: &HostView<'_>) -> Result<(), Violation> {
    let listed: Vec<_> = view.catalogue.walk(None).collect();
    let announced = view.sessions.values().filter(|s| s.announced).count();
    if listed.len() != announced {
        return fail("inv_catalogue_lists_announced", format!("{} rows for {announced} announced sessions", listed.len()));
    }
    for row in listed {
        match view.sessions.get(&row.uri) {
            Some(s) if s.announced && s.modified_at.0 == row.modified_ms => {}
            _ => return fail("inv_catalogue_lists_announced", format!("row {} is stale", row.uri)),
        }
    }
    // The external order lists exactly the announced external sessions.
    let externals = view.catalogue.newest_externals(i64::MIN, usize::MAX);
    let announced_external = view.sessions.values().filter(|s| s.announced && s.record.external).count();
    if externals.len() != announced_external {
        return fail("inv_catalogue_lists_announced", format!("{} external rows for {announced_external} announced external sessions", externals.len()));
    }
    for (ms, uri) in externals {
        match view.sessions.get(&uri) {
            Some(s) if s.record.external && s.modified_at.0 == ms => {}
            _ => return fail("inv_catalogue_lists_announced", format!("external row {uri} is stale")),
        }
    }
    Ok(())
}

/// The index of held sessions the per-input work walks names exactly the
/// sessions whose state is held: a session missing from it could never
/// sleep or be evicted (Sessions page, "Sleep and wake"), one left in it
/// after its state went would be counted against the residency limit.
pub fn inv_held_index_consistent(view: &HostView<'_>) -> Result<(), Violation> {
    let held: std::collections::BTreeSet<&String> = view.sessions.iter().filter(|(_, s)| s.resident.is_some()).map(|(u, _)| u).collect();
    if held.len() != view.held.len() || !view.held.iter().all(|u| held.contains(u)) {
        let extra: Vec<_> = view.held.iter().filter(|u| !held.contains(u)).collect();
        let missing: Vec<_> = held.iter().filter(|u| !view.held.contains(**u)).collect();
        return fail("inv_held_index_consistent", format!("held index has extra {extra:?}, misses {missing:?}"));
    }
    Ok(())
}

/// "InputNeeded while any chat waits on somebody, else InProgress while any
/// chat runs, else the default chat's bits ... Row and state carry the same
/// aggregate" (Sessions page, "The state a session reports"): the activity
/// bits of every held session's row follow from its chats' own bits.
pub fn inv_row_aggregate(view: &HostView<'_>) -> Result<(), Violation> {
    for (uri, s) in view.sessions {
        let Some(resident) = &s.resident else { continue };
        let bits: Vec<u32> = resident.chats.values().map(|c| c.status & 0x1F).collect();
        let default = resident.chats.get(&s.record.default_chat).map_or(0, |c| c.status & 0x1F);
        let expected = if bits.contains(&24) {
            24
        } else if bits.contains(&8) {
            8
        } else if default == 0 {
            1
        } else {
            default
        };
        let row = s.summary().status & 0x1F;
        if row != expected {
            return fail("inv_row_aggregate", format!("{uri}: row activity {row}, chats {bits:?} (default {default}) say {expected}"));
        }
    }
    Ok(())
}
