//! State rules, one pure function each, checked after every simulated step
//! (docs/STYLE.md 3.7). Each cites the sentence of the Sessions page it
//! enforces.
//!
//! Two kinds: [`ALL`] rules read the state after an input
//! ([`check_all`]); [`STEP`] rules compare it with a [`Before`] snapshot
//! taken just before the input ([`check_step`]), for rules about what an
//! input may change ("moves forward only", "never moves", "none goes
//! while ...").

use std::collections::BTreeMap;

use ahp_types::state::SessionLifecycle;
use ahp_types::Uri;

use crate::host::{HostView, Went};
use crate::session::Session;
use crate::time::WallTime;
use crate::session::state::{ACTIVITY_MASK, ERROR, IDLE, INPUT_NEEDED, IN_PROGRESS};
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

/// Every state rule across sessions (or of the host as a whole), by id.
pub const ALL: &[(&str, Check)] = &[
    ("inv_residency_within_limit", inv_residency_within_limit),
    ("inv_active_sessions_counts_turns", inv_active_sessions_counts_turns),
    ("inv_deadline_after_now", inv_deadline_after_now),
    ("inv_chat_index_consistent", inv_chat_index_consistent),
    ("inv_catalogue_lists_announced", inv_catalogue_lists_announced),
    ("inv_held_index_consistent", inv_held_index_consistent),
    ("inv_archived_goes_at_once", inv_archived_goes_at_once),
    ("inv_conversation_index_consistent", inv_conversation_index_consistent),
    ("inv_tombstone_index_consistent", inv_tombstone_index_consistent),
    ("inv_replay_buffer_window", inv_replay_buffer_window),
    ("inv_queue_never_stalls", inv_queue_never_stalls),
    ("inv_wake_index_consistent", inv_wake_index_consistent),
    ("inv_due_wake_fired", inv_due_wake_fired),
    ("inv_child_owned_as_parent", inv_child_owned_as_parent),
    ("inv_child_finish_delivered", inv_child_finish_delivered),
    ("inv_automation_index_consistent", inv_automation_index_consistent),
    ("inv_due_automation_fired", inv_due_automation_fired),
    ("inv_pinned_session_exists", inv_pinned_session_exists),
    ("inv_one_run_per_occurrence", inv_one_run_per_occurrence),
];

type SessionCheck = fn(&Uri, &Session) -> Result<(), Violation>;

/// Every state rule of one session read alone, by id: what it says of a
/// session depends on that session only, so a session no input touched
/// still keeps it ([`check_touched`]).
pub const SESSION: &[(&str, SessionCheck)] = &[
    ("inv_live_is_resident", inv_live_is_resident),
    ("inv_asleep_runs_no_turn", inv_asleep_runs_no_turn),
    ("inv_provisional_not_announced_ready", inv_provisional_not_announced_ready),
    ("inv_modified_not_before_created", inv_modified_not_before_created),
    ("inv_default_chat_exists", inv_default_chat_exists),
    ("inv_row_aggregate", inv_row_aggregate),
    ("inv_settled_row_not_resident", inv_settled_row_not_resident),
    ("inv_chat_flags_in_step", inv_chat_flags_in_step),
    ("inv_fork_starts_with_its_source", inv_fork_starts_with_its_source),
    ("inv_queue_matches_record", inv_queue_matches_record),
    ("inv_questions_in_running_turn", inv_questions_in_running_turn),
];

/// Runs every rule on every session; the first violation wins.
pub fn check_all(view: &HostView<'_>) -> Result<(), Violation> {
    for (_, check) in ALL {
        check(view)?;
    }
    check_sessions(view)
}

/// Runs the [`SESSION`] rules on every session (a host just built from
/// its records, before any input).
pub fn check_sessions(view: &HostView<'_>) -> Result<(), Violation> {
    for (uri, s) in view.sessions {
        check_session(uri, s)?;
    }
    Ok(())
}

/// Runs every rule, the [`SESSION`] rules only on the sessions the last
/// input touched (`SessionTable::touched`): the same verdict as
/// [`check_all`] when every state it held before the input passed, at a
/// fraction of the cost (the simulator runs it after every step).
pub fn check_touched(view: &HostView<'_>) -> Result<(), Violation> {
    let Some(touched) = view.sessions.touched() else { return check_all(view) };
    for (_, check) in ALL {
        check(view)?;
    }
    for uri in touched {
        if let Some(s) = view.sessions.get(uri) {
            check_session(uri, s)?;
        }
    }
    Ok(())
}

fn check_session(uri: &Uri, s: &Session) -> Result<(), Violation> {
    for (_, check) in SESSION {
        check(uri, s)?;
    }
    Ok(())
}

/// What the step rules need of the state before an input: per session,
/// a few facts copied out (cheap: no records or states are cloned).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Before {
    /// Every session known before the input, by URI.
    pub sessions: BTreeMap<Uri, SessionBefore>,
}

/// One session's facts before an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionBefore {
    /// `createdAt`, ms.
    pub created_at: WallTime,
    /// `modifiedAt`, ms.
    pub modified_at: WallTime,
    /// Whether its state was held.
    pub held: bool,
    /// Whether it was live.
    pub live: bool,
}

/// Takes the snapshot [`check_step`] compares the state after the next
/// input with.
pub fn before(view: &HostView<'_>) -> Before {
    Before {
        sessions: view
            .sessions
            .iter()
            .map(|(uri, s)| {
                let facts = SessionBefore {
                    created_at: s.created_at(),
                    modified_at: s.modified_at(),
                    held: s.resident().is_some(),
                    live: s.phase().is_live(),
                };
                (uri.clone(), facts)
            })
            .collect(),
    }
}

type StepCheck = fn(&Before, &HostView<'_>) -> Result<(), Violation>;

/// Every step rule, by id.
pub const STEP: &[(&str, StepCheck)] = &[
    ("inv_created_at_never_moves", inv_created_at_never_moves),
    ("inv_modified_at_forward_only", inv_modified_at_forward_only),
    ("inv_none_goes_watched_or_busy", inv_none_goes_watched_or_busy),
    ("inv_least_recently_used_goes_first", inv_least_recently_used_goes_first),
];

/// Runs every step rule against the snapshot taken before the input; the
/// first violation wins.
pub fn check_step(before: &Before, after: &HostView<'_>) -> Result<(), Violation> {
    for (_, check) in STEP {
        check(before, after)?;
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
    let counted: Vec<_> = view.sessions.values().filter(|s| s.resident().is_some() && s.is_announced()).collect();
    if counted.len() <= limit {
        return Ok(());
    }
    let watched = |s: &crate::session::Session| view.conns.values().any(|c| c.watches(s.record()));
    let unpinned = counted
        .iter()
        .filter(|s| {
            // A session whose backend cannot resume it is pinned too: its
            // turns could not be rebuilt once its state went.
            matches!(s.phase(), Phase::Live { .. } | Phase::Asleep)
                && s.can_resume()
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
pub fn inv_live_is_resident(uri: &Uri, s: &Session) -> Result<(), Violation> {
    if matches!(s.phase(), Phase::Live { .. } | Phase::Starting(_)) && s.resident().is_none() {
        return fail("inv_live_is_resident", format!("{uri} is {} without state", s.phase().name()));
    }
    Ok(())
}

/// "A session sleeps with nothing running": no send in flight, no busy
/// agent, no turn held for an agent (one started while it slept woke it);
/// and a wake waits for at least one start, or nothing would end it.
pub fn inv_asleep_runs_no_turn(uri: &Uri, s: &Session) -> Result<(), Violation> {
    if s.is_asleep() && (!s.work().sends_in_flight.is_empty() || s.is_busy()) {
        return fail("inv_asleep_runs_no_turn", format!("{uri} asleep with work in hand"));
    }
    // A turn started while a session sleeps wakes it in the same input
    // (`Session::start_turn`, `TurnSend::NeedsWake`), or its tree is being
    // put back first (`git_begin`, `Trees::restore_before_wake`), or it
    // waits for the write naming its conversation, whose answer wakes the
    // session (`Session::conversation_written`, `NamesWritten::wake`): one
    // still held by a session asleep otherwise waits on an agent nothing
    // will start.
    if s.is_asleep() && s.work().git_begin.is_none() {
        let naming = |chat: &Uri| s.work().conversation_writes.values().any(|named| named.contains(chat));
        if let Some((chat, _, _)) = s.work().pending_sends.iter().find(|(chat, _, _)| !naming(chat)) {
            return fail("inv_asleep_runs_no_turn", format!("{uri} asleep holding a turn of {chat} for an agent nothing starts"));
        }
    }
    // A wake ends when the last start it waits for answers: a wake waiting
    // for none never ends (sim seed 11569 at d163ccb).
    if s.phase().is_waking() && s.phase().awaited().is_some_and(|ops| ops.is_empty()) {
        return fail("inv_asleep_runs_no_turn", format!("{uri} waking with no start left to answer"));
    }
    Ok(())
}

/// Questions (issue 23; Sessions page, "Sleep and wake": "A session does
/// not sleep while any of its chats has ... a question waiting for an
/// answer"; "The state a session reports": InputNeeded while any chat waits
/// on somebody): a question waits only in its chat's running turn (a
/// turn's end cancels the ones left, `session/questions.rs`), and a chat
/// with one reads InputNeeded, as does its session, which is not asleep.
pub fn inv_questions_in_running_turn(uri: &Uri, s: &Session) -> Result<(), Violation> {
    let Some(resident) = &s.resident() else { return Ok(()) };
    for (chat_uri, chat) in &resident.chats {
        if let Some(left) = crate::session::questions::open_in_ended_turn(chat) {
            return fail("inv_questions_in_running_turn", format!("{chat_uri}: an ended turn holds an open question ({left})"));
        }
        if crate::session::questions::open(chat).is_empty() {
            continue;
        }
        if s.is_asleep() {
            return fail("inv_questions_in_running_turn", format!("{uri} asleep with a question open in {chat_uri}"));
        }
        if chat.status & ACTIVITY_MASK != INPUT_NEEDED {
            return fail("inv_questions_in_running_turn", format!("{chat_uri} has a question open but reads {}", chat.status & ACTIVITY_MASK));
        }
        let row = s.summary().status & ACTIVITY_MASK;
        if row != INPUT_NEEDED {
            return fail("inv_questions_in_running_turn", format!("{uri} has a question open in {chat_uri} but its row reads {row}"));
        }
    }
    Ok(())
}

/// "nothing announces it or lists it until its first turn": a session not
/// announced is still `creating`.
pub fn inv_provisional_not_announced_ready(uri: &Uri, s: &Session) -> Result<(), Violation> {
    if !s.is_announced() {
        if let Some(r) = &s.resident() {
            if r.session.lifecycle != SessionLifecycle::Creating {
                return fail("inv_provisional_not_announced_ready", format!("{uri} unannounced but not creating"));
            }
        }
    }
    Ok(())
}

/// "Every client hears every change" (issue 19), kept exact while a row
/// keeps no copy of what root subscribers hold (`Announcement::Settled`,
/// issue 21): only a session whose state is not held is settled. A held
/// state moves through the protocol's reducers, and its row is diffed
/// against the copy kept (the table makes it explicit before any change).
pub fn inv_settled_row_not_resident(uri: &Uri, s: &Session) -> Result<(), Violation> {
    if matches!(s.announcement(), crate::session::Announcement::Settled) && s.resident().is_some() {
        return fail("inv_settled_row_not_resident", format!("{uri} is settled with its state held"));
    }
    Ok(())
}

/// Issue 23, "a queued message is never lost across a restart nor run
/// twice": what a chat's state shows queued (`queuedMessages`, advanced by
/// the `ahp` reducer over what was echoed) is exactly its record's queue,
/// the same ids and messages in the same order, after every input. Every
/// queue change is echoed only once written ahead into the record, and a
/// message leaves the queue in the same durable write that records the
/// turn it became (`crate::session::pending`), so what a client was shown
/// queued is what a restart reads back.
pub fn inv_queue_matches_record(uri: &Uri, s: &Session) -> Result<(), Violation> {
    let Some(resident) = s.resident() else { return Ok(()) };
    for chat in &s.record().chats {
        let Some(state) = resident.chats.get(&chat.resource) else { continue };
        let shown = state.queued_messages.as_deref().unwrap_or_default();
        let same = shown.len() == chat.queued.len() && shown.iter().zip(&chat.queued).all(|(a, b)| a.id == b.id && a.message == b.message);
        let steering_same = match (&state.steering_message, &chat.steering) {
            (None, None) => true,
            (Some(a), Some(b)) => a.id == b.id && a.message == b.message,
            _ => false,
        };
        if !steering_same {
            return fail("inv_queue_matches_record", format!("{uri} chat {} shows another steering message than its record holds", chat.resource));
        }
        if !same {
            let ids = |v: Vec<&str>| v.join(",");
            return fail("inv_queue_matches_record", format!(
                "{uri} chat {} shows queued [{}] but its record holds [{}]",
                chat.resource,
                ids(shown.iter().map(|m| m.id.as_str()).collect()),
                ids(chat.queued.iter().map(|m| m.id.as_str()).collect())
            ));
        }
    }
    Ok(())
}

/// Issue 23, "when the turn ends the host removes the first and starts it
/// as the next turn, in order": after every input, no live session (not
/// stopping) leaves a queued message waiting in a chat that runs no turn
/// and has no send waiting, with no write of its own in flight or queued
/// (one start is parked at a time: `Session::queue_due` is what the host
/// asks). A queue waits only while its session sleeps ("wakes nothing by
/// itself") or the host stops.
pub fn inv_queue_never_stalls(view: &HostView<'_>) -> Result<(), Violation> {
    if view.stopping() {
        return Ok(());
    }
    for uri in view.held {
        let Some(s) = view.sessions.get(uri) else { continue };
        if let Some(chat) = s.queue_due(false) {
            return fail("inv_queue_never_stalls", format!("{uri} chat {chat} holds a queued message with no turn running, and none starts"));
        }
        // A start the store refused waits for its retry, which fires once
        // due (`Host::retry_queued_starts`): never left overdue.
        if let Some(at) = s.work().queue_retry_at.filter(|at| *at <= view.now.mono) {
            return fail("inv_queue_never_stalls", format!("{uri}'s refused queued start was due at {} and was not tried again", at.0));
        }
    }
    Ok(())
}

/// "createdAt is when the session was first started and never moves ...
/// modifiedAt ... moves forward only": modifiedAt is never before createdAt.
pub fn inv_modified_not_before_created(uri: &Uri, s: &Session) -> Result<(), Violation> {
    if s.modified_at() < s.created_at() {
        return fail("inv_modified_not_before_created", format!("{uri} modified {} < created {}", s.modified_at().0, s.created_at().0));
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
pub fn inv_default_chat_exists(uri: &Uri, s: &Session) -> Result<(), Violation> {
    if !s.record().chats.iter().any(|c| s.record().is_default_chat(&c.resource)) {
        return fail("inv_default_chat_exists", format!("{uri} lost its default chat"));
    }
    if let Some(r) = &s.resident() {
        if !r.chats.contains_key(s.record().default_chat().as_ref()) {
            return fail("inv_default_chat_exists", format!("{uri} state lost its default chat"));
        }
    }
    Ok(())
}

/// A chat's read and archived bits are the host's own, one value
/// everywhere they show (issue 23; ahp-types `chat/isReadChanged`: "the host
/// also synchronizes the addressed chat's `ChatSummary.status` and
/// `SessionChatSummary.status` projections"): the chat's record (what a
/// restart reads back), its held state, the session state's list of chats
/// and the catalogue row carry the same two bits, and the default chat is
/// never archived on its own (`session/chat_flags.rs`).
pub fn inv_chat_flags_in_step(uri: &Uri, s: &Session) -> Result<(), Violation> {
    use crate::session::state::{IS_ARCHIVED, IS_READ};
    const FLAGS: u32 = IS_READ | IS_ARCHIVED;
    let row = s.summary();
    for rec in &s.record().chats {
        let stored = rec.status & FLAGS;
        if s.record().is_default_chat(&rec.resource) && stored & IS_ARCHIVED != 0 {
            return fail("inv_chat_flags_in_step", format!("{uri}: its default chat is archived on its own"));
        }
        let listed = row.chats.as_ref().and_then(|l| l.iter().find(|c| c.resource == rec.resource)).and_then(|c| c.status);
        if listed.map(|st| st & FLAGS) != Some(stored) {
            return fail("inv_chat_flags_in_step", format!("{uri}: row lists chat {} with {listed:?}, its record {stored}", rec.resource));
        }
        let Some(resident) = &s.resident() else { continue };
        let held = resident.chats.get(&rec.resource).map(|c| c.status & FLAGS);
        if held.is_some_and(|h| h != stored) {
            return fail("inv_chat_flags_in_step", format!("{uri}: chat {} holds flags {held:?}, its record {stored}", rec.resource));
        }
        let summary = resident.session.chats.iter().find(|c| c.resource == rec.resource).map(|c| c.status & FLAGS);
        if held.is_some() && summary.is_some_and(|f| f != stored) {
            return fail("inv_chat_flags_in_step", format!("{uri}: session state lists chat {} with flags {summary:?}, its record {stored}", rec.resource));
        }
    }
    Ok(())
}

/// "Copies source history through a completed turn into the new chat"
/// (ahp-types `ForkChatSource`; issue 23): a fork's held history begins with
/// the turns it was made with (its record's `seed`, less any a rewind took
/// away), whatever its backend gives back, across sleep, eviction and
/// restarts; and a chat with an origin shows it (`session/fork.rs`).
pub fn inv_fork_starts_with_its_source(uri: &Uri, s: &Session) -> Result<(), Violation> {
    let Some(resident) = &s.resident() else { return Ok(()) };
    for rec in &s.record().chats {
        let Some(held) = resident.chats.get(&rec.resource) else { continue };
        let prefix: Vec<&str> = held.turns.iter().take(rec.seed.len()).map(|t| t.id.as_str()).collect();
        let seed: Vec<&str> = rec.seed.iter().map(|t| t.id.as_str()).collect();
        if prefix != seed {
            return fail("inv_fork_starts_with_its_source", format!("{uri}: chat {} starts with {prefix:?}, not its source's {seed:?}", rec.resource));
        }
        if held.origin.as_ref() != rec.origin.as_deref() {
            return fail("inv_fork_starts_with_its_source", format!("{uri}: chat {} shows origin {:?}, its record {:?}", rec.resource, held.origin, rec.origin));
        }
    }
    Ok(())
}

/// Deadlines are in the future once `handle` returns (what was due fired).
pub fn inv_deadline_after_now(view: &HostView<'_>) -> Result<(), Violation> {
    if let Some(d) = view.next_deadline() {
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
        for c in &s.record().chats {
            count += 1;
            if view.chats.get(&c.resource).map(|u| &**u) != Some(uri.as_str()) {
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
    // Borrowed walks, no row copied: this runs after every simulated step.
    let announced = view.sessions.values().filter(|s| s.is_announced()).count();
    if view.catalogue.len() != announced {
        return fail("inv_catalogue_lists_announced", format!("{} rows for {announced} announced sessions", view.catalogue.len()));
    }
    for (modified_ms, uri, _) in view.catalogue.walk_borrowed(None) {
        match view.sessions.get(uri) {
            Some(s) if s.is_announced() && s.modified_at().0 == modified_ms => {}
            _ => return fail("inv_catalogue_lists_announced", format!("row {uri} is stale")),
        }
    }
    // The external order lists exactly the announced external sessions.
    let externals = view.catalogue.newest_externals(i64::MIN, usize::MAX);
    let announced_external = view.sessions.values().filter(|s| s.is_announced() && s.record().external).count();
    if externals.len() != announced_external {
        return fail("inv_catalogue_lists_announced", format!("{} external rows for {announced_external} announced external sessions", externals.len()));
    }
    for (ms, uri) in externals {
        match view.sessions.get(&uri) {
            Some(s) if s.record().external && s.modified_at().0 == ms => {}
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
    // Counted, then each index entry looked up: no set is built for the
    // common case (this runs after every simulated step).
    let held_count = view.sessions.values().filter(|s| s.resident().is_some()).count();
    let all_held = view.held.iter().all(|u| view.sessions.get(u).is_some_and(|s| s.resident().is_some()));
    if held_count != view.held.len() || !all_held {
        let held: std::collections::BTreeSet<&String> = view.sessions.iter().filter(|(_, s)| s.resident().is_some()).map(|(u, _)| u).collect();
        let extra: Vec<_> = view.held.iter().filter(|u| !held.contains(u)).collect();
        let missing: Vec<_> = held.iter().filter(|u| !view.held.contains(**u)).collect();
        return fail("inv_held_index_consistent", format!("held index has extra {extra:?}, misses {missing:?}"));
    }
    Ok(())
}

/// The index a pass over a backend's transcripts looks each row up in
/// (which session holds a provider's conversation) names exactly the
/// conversations of every session's chats, as the input left them: a
/// conversation missing from it would be listed again as another session
/// (Sessions page, "Finding one"), one left in it could keep a session's
/// row from being listed. Computed afresh from the sessions
/// (`SessionTable::check_conversations`).
pub fn inv_conversation_index_consistent(view: &HostView<'_>) -> Result<(), Violation> {
    view.sessions.check_conversations().map_err(|detail| Violation { rule: "inv_conversation_index_consistent", detail })
}

/// The tombstones' index by conversation names exactly the conversations
/// of the tombstones' chats: a row of a disposed session it missed would be
/// listed again (Sessions page: a disposed session stays disposed).
pub fn inv_tombstone_index_consistent(view: &HostView<'_>) -> Result<(), Violation> {
    view.check_tombstones().map_err(|detail| Violation { rule: "inv_tombstone_index_consistent", detail })
}

/// The host's wake index names exactly the wakes the sessions' records
/// hold (issue 24, `host/tools.rs`): a wake asked for is found when due,
/// asleep or not, and a disposed session's wakes are gone (its record is).
pub fn inv_wake_index_consistent(view: &HostView<'_>) -> Result<(), Violation> {
    let mut want = std::collections::BTreeSet::new();
    for (uri, s) in view.sessions {
        for w in s.record().tools.iter().flat_map(|t| t.wakes.iter()) {
            want.insert((w.at, uri.clone(), w.id.clone()));
        }
    }
    if &want != view.wake_index() {
        return fail("inv_wake_index_consistent", format!("the index holds {:?}, the records {want:?}", view.wake_index()));
    }
    Ok(())
}

/// "start_child_session(provider, prompt, working_directory?) ... a child
/// session owned as its parent is" (issue 24; docs/DECISIONS.md, 24): a
/// child its parent lists has the parent's owner and scope.
pub fn inv_child_owned_as_parent(view: &HostView<'_>) -> Result<(), Violation> {
    for (uri, s) in view.sessions.iter() {
        let Some(link) = s.record().tools.as_ref().and_then(|t| t.parent.as_ref()) else { continue };
        let Some(parent) = view.sessions.get(&link.session).filter(|_| view.is_child_of(uri, &link.session)) else { continue };
        if (&s.record().owner, &s.record().scope) != (&parent.record().owner, &parent.record().scope) {
            return fail("inv_child_owned_as_parent", format!(
                "{uri} is owned {:?} / {:?}, its parent {} {:?} / {:?}",
                s.record().owner, s.record().scope, link.session, parent.record().owner, parent.record().scope
            ));
        }
    }
    Ok(())
}

/// "when the child's turn ends, the parent gets childFinished" (issue 24;
/// docs/DECISIONS.md, 24): after every input, every turn end a child
/// numbered was delivered to the parent that lists it (its entry's
/// `delivered` is as high), unless one of them is being disposed or it is
/// owed until the next input (the host stops, or it was read back at
/// start). That each is delivered only once is the simulator's
/// `child_finished_once`.
pub fn inv_child_finish_delivered(view: &HostView<'_>) -> Result<(), Violation> {
    for (uri, s) in view.sessions.iter() {
        let Some(link) = s.record().tools.as_ref().and_then(|t| t.parent.as_ref()) else { continue };
        if link.finished == 0 || view.children_owed().contains(uri) || !view.is_child_of(uri, &link.session) {
            continue;
        }
        let Some(parent) = view.sessions.get(&link.session) else { continue };
        if matches!(s.phase(), Phase::Disposing(_)) || matches!(parent.phase(), Phase::Disposing(_)) {
            continue;
        }
        let delivered = parent.record().tools.as_ref().and_then(|t| t.children.iter().find(|c| c.session == *uri)).map_or(0, |c| c.delivered);
        if delivered < link.finished {
            return fail("inv_child_finish_delivered", format!("{uri}'s turn end {} was not delivered to {} (delivered {delivered})", link.finished, link.session));
        }
    }
    Ok(())
}

/// "a wake its agent asked for with schedule_wakeup" wakes the session:
/// after an input, no wake is left waiting whose time has come (it fired
/// in that input), unless the host is stopping (it fires after the
/// restart).
pub fn inv_due_wake_fired(view: &HostView<'_>) -> Result<(), Violation> {
    if view.stopping() {
        return Ok(());
    }
    match view.wake_index().first() {
        Some((at, uri, id)) if *at <= view.now.wall => fail("inv_due_wake_fired", format!("{uri}'s {id} was due at {} and did not fire", at.0)),
        _ => Ok(()),
    }
}

/// The schedule index names exactly the next occurrence of every schedule
/// trigger of every enabled automation, as their records hold them
/// (docs/DECISIONS.md, 26): a fire is found by the index alone, so an
/// occurrence missing from it would never fire.
pub fn inv_automation_index_consistent(view: &HostView<'_>) -> Result<(), Violation> {
    let mut want = std::collections::BTreeSet::new();
    for a in view.automations() {
        if !a.definition.enabled && !a.next.is_empty() {
            return fail("inv_automation_index_consistent", format!("{} is disabled and still has occurrences {:?}", a.resource, a.next));
        }
        for (id, at) in &a.next {
            if !crate::automation::schedules(&a.definition).any(|t| t.id == *id) {
                return fail("inv_automation_index_consistent", format!("{} has an occurrence for trigger {id} it does not define", a.resource));
            }
            want.insert((*at, a.resource.clone(), id.clone()));
        }
    }
    if &want != view.automation_due_index() {
        return fail("inv_automation_index_consistent", format!("the index holds {:?}, the records {want:?}", view.automation_due_index()));
    }
    Ok(())
}

/// A schedule occurrence whose time has come was evaluated in that input
/// (a run made, or its misfire policy applied), unless the host stops.
pub fn inv_due_automation_fired(view: &HostView<'_>) -> Result<(), Violation> {
    if view.stopping() {
        return Ok(());
    }
    match view.automation_due_index().first() {
        Some((at, uri, id)) if *at <= view.now.wall => fail("inv_due_automation_fired", format!("{uri}'s trigger {id} was due at {} and was not evaluated", at.0)),
        _ => Ok(()),
    }
}

/// "A disposed session's automations are gone" (docs/DECISIONS.md, 25):
/// every automation pinned to a session names one the host has, and the
/// pin index says exactly which.
pub fn inv_pinned_session_exists(view: &HostView<'_>) -> Result<(), Violation> {
    let mut want: BTreeMap<Uri, std::collections::BTreeSet<Uri>> = BTreeMap::new();
    for a in view.automations() {
        if let Some(pin) = a.pinned() {
            if !view.sessions.contains_key(pin) {
                return fail("inv_pinned_session_exists", format!("{} is pinned to {pin}, which is gone", a.resource));
            }
            want.entry(pin.to_owned()).or_default().insert(a.resource.clone());
        }
    }
    if &want != view.automation_pins() {
        return fail("inv_pinned_session_exists", format!("the pin index holds {:?}, the records {want:?}", view.automation_pins()));
    }
    Ok(())
}

/// "One trigger occurrence is atomically associated with at most one run"
/// (AHP automations guide; docs/DECISIONS.md, 26): no two runs an
/// automation keeps name the same trigger and occurrence, and no run names
/// an occurrence its trigger still waits for.
pub fn inv_one_run_per_occurrence(view: &HostView<'_>) -> Result<(), Violation> {
    use ahp_types::state::AutomationRunOrigin;
    for a in view.automations() {
        let mut seen = std::collections::BTreeSet::new();
        for r in &a.runs {
            let AutomationRunOrigin::Trigger(t) = &r.origin else { continue };
            let Some(at) = t.scheduled_for.as_deref() else { continue };
            if !seen.insert((t.trigger_id.as_str(), at)) {
                return fail("inv_one_run_per_occurrence", format!("{} has two runs for {} at {at}", a.resource, t.trigger_id));
            }
            if a.next.get(&t.trigger_id).is_some_and(|n| Some(*n) == WallTime::parse_iso(at)) {
                return fail("inv_one_run_per_occurrence", format!("{}'s trigger {} still waits for {at}, which made {}", a.resource, t.trigger_id, r.resource));
            }
        }
    }
    Ok(())
}

/// The replay buffer a `reconnect` replays from holds at most
/// `replay_buffer_len` envelopes and `replay_buffer_max_bytes` bytes (its
/// count of bytes true), in the order they were stamped, none
/// stamped after the host's last `serverSeq` (`ReplayBuffer::check`):
/// a replay gives a client what it missed in order, never out of it.
pub fn inv_replay_buffer_window(view: &HostView<'_>) -> Result<(), Violation> {
    view.check_replay().map_err(|detail| Violation { rule: "inv_replay_buffer_window", detail })
}

/// "InputNeeded while any chat waits on somebody, else InProgress while any
/// chat runs, else the default chat's bits ... Row and state carry the same
/// aggregate" (Sessions page, "The state a session reports"): the activity
/// bits of every held session's row follow from its chats' own bits.
pub fn inv_row_aggregate(uri: &Uri, s: &Session) -> Result<(), Violation> {
    {
        let Some(resident) = &s.resident() else { return Ok(()) };
        let bits: Vec<u32> = resident.chats.values().map(|c| c.status & ACTIVITY_MASK).collect();
        let default = resident.chats.get(s.record().default_chat().as_ref()).map_or(0, |c| c.status & ACTIVITY_MASK);
        // InputNeeded first: it carries the InProgress bit.
        let expected = if bits.contains(&INPUT_NEEDED) {
            INPUT_NEEDED
        } else if bits.contains(&IN_PROGRESS) {
            IN_PROGRESS
        } else if s.transcript_damaged() {
            // At rest, a damaged transcript's Error (session/damage.rs).
            ERROR
        } else if default == 0 {
            IDLE
        } else {
            default
        };
        let row = s.summary().status & ACTIVITY_MASK;
        if row != expected {
            return fail("inv_row_aggregate", format!("{uri}: row activity {row}, chats {bits:?} (default {default}) say {expected}"));
        }
    }
    Ok(())
}

/// "An archived session goes at once" (Sessions page, "Sleep and wake"):
/// with the residency limit on, no archived session the limit may take
/// keeps its state once an input is handled.
pub fn inv_archived_goes_at_once(view: &HostView<'_>) -> Result<(), Violation> {
    if view.config.residency_limit == 0 {
        return Ok(());
    }
    for (uri, s) in held(view) {
        if s.record().is_archived && evictable(view, s) {
            return fail("inv_archived_goes_at_once", format!("{uri} is archived and evictable but still held"));
        }
    }
    Ok(())
}

/// Whether the residency limit may take `s` in `view`, read from the
/// state alone (the same rule as the host's own `evictable`, written out
/// again so that the check does not trust it): state held, something said,
/// live or asleep, resumable, nothing in hand, nobody watching.
fn evictable(view: &HostView<'_>, s: &Session) -> bool {
    s.resident().is_some()
        && s.is_announced()
        && matches!(s.phase(), Phase::Live { .. } | Phase::Asleep)
        && s.can_resume()
        && !s.has_work_in_hand()
        && !watched(view, s)
}

/// The sessions whose state is held (by the host's index, which
/// `inv_held_index_consistent` checks).
fn held<'v>(view: &'v HostView<'_>) -> impl Iterator<Item = (&'v Uri, &'v Session)> + 'v {
    view.held.iter().filter_map(|u| view.sessions.get_key_value(u))
}

fn watched(view: &HostView<'_>, s: &Session) -> bool {
    view.conns.values().any(|c| c.watches(s.record()))
}

/// "createdAt is when the session was first started and never moves"
/// (Sessions page, "The state a session reports"): no input changes a
/// known session's `createdAt`.
pub fn inv_created_at_never_moves(before: &Before, view: &HostView<'_>) -> Result<(), Violation> {
    for (uri, b) in &before.sessions {
        if let Some(s) = view.sessions.get(uri) {
            if s.created_at() != b.created_at {
                return fail("inv_created_at_never_moves", format!("{uri}: createdAt {} -> {}", b.created_at.0, s.created_at().0));
            }
        }
    }
    Ok(())
}

/// "modifiedAt is the last change ... so it moves forward only and a chat
/// closed or moved away takes nothing back with it" (Sessions page, "The
/// state a session reports"), whatever the wall clock does: no input
/// moves a known session's `modifiedAt` back, and its record says the same
/// time.
pub fn inv_modified_at_forward_only(before: &Before, view: &HostView<'_>) -> Result<(), Violation> {
    for (uri, b) in &before.sessions {
        if let Some(s) = view.sessions.get(uri) {
            if s.modified_at() < b.modified_at {
                return fail("inv_modified_at_forward_only", format!("{uri}: modifiedAt {} -> {}", b.modified_at.0, s.modified_at().0));
            }
        }
    }
    Ok(())
}

/// "None goes while a client watches it or while it has work in hand ...
/// a session whose backend cannot resume it never sleeps" (Sessions page,
/// "Sleep and wake"). Every session the input put to sleep was live
/// before it; after the input no session that went is watched, none's backend is
/// one that cannot resume it, and none has work in hand that going does
/// not end (a parked write, queued work, waiters, git work, turns waiting
/// for the agent; a slept one, whose state stays, also no turn running,
/// message queued or question waiting). Sends and background work end
/// with the agents and cannot be seen afterwards; an input may end them
/// and let the session go in one step. Conversely every session whose
/// state went while it stayed known is one the input says it evicted.
pub fn inv_none_goes_watched_or_busy(before: &Before, view: &HostView<'_>) -> Result<(), Violation> {
    const RULE: &str = "inv_none_goes_watched_or_busy";
    for (uri, how) in view.went {
        let Some(s) = view.sessions.get(uri) else { continue };
        let Some(b) = before.sessions.get(uri) else {
            return fail(RULE, format!("{uri} went ({how:?}) in the input that made it"));
        };
        // A sleep takes a live session only ("A session does not sleep
        // while it is waking"); an eviction may follow a wake that ended
        // in the same input, once its waiters were served.
        if *how == Went::Slept && !b.live {
            return fail(RULE, format!("{uri} went ({how:?}) from a phase it may not go from"));
        }
        if watched(view, s) {
            return fail(RULE, format!("{uri} went ({how:?}) while a client watches it"));
        }
        if !s.can_resume() {
            return fail(RULE, format!("{uri} went ({how:?}) though its backend cannot resume it"));
        }
        let left = s.work().parked.is_some() || !s.work().inbox.is_empty() || !s.work().waiters.is_empty() || !s.work().git_ops.is_empty() || !s.work().pending_sends.is_empty();
        if left || (*how == Went::Slept && s.has_work_in_hand()) {
            return fail(RULE, format!("{uri} went ({how:?}) with work in hand"));
        }
        if *how == Went::Evicted && s.resident().is_some() {
            return fail(RULE, format!("{uri} evicted but its state is held"));
        }
    }
    for (uri, b) in &before.sessions {
        let Some(s) = view.sessions.get(uri) else { continue };
        if b.held && s.resident().is_none() && !view.went.iter().any(|(u, how)| u == uri && *how == Went::Evicted) {
            return fail(RULE, format!("{uri}'s state went without an eviction"));
        }
    }
    Ok(())
}

/// "Over that count the least recently used session goes first ... An
/// archived session goes at once" (Sessions page, "Sleep and wake"): a
/// session the input evicted that is not archived was the least recently
/// used of those the limit may take. Checked against what is left: no
/// session still evictable after the input was used less recently (ties
/// on the use stamp break on the URI, as the limit picks).
pub fn inv_least_recently_used_goes_first(_before: &Before, view: &HostView<'_>) -> Result<(), Violation> {
    let victims = view.went.iter().filter(|(_, how)| *how == Went::Evicted);
    for (uri, _) in victims {
        let Some(v) = view.sessions.get(uri) else { continue };
        if v.record().is_archived {
            continue;
        }
        let older = held(view)
            .find(|(u, s)| evictable(view, s) && !view.went.iter().any(|(w, _)| w == *u) && (s.last_used(), *u) < (v.last_used(), uri));
        if let Some((u, s)) = older {
            return fail("inv_least_recently_used_goes_first", format!(
                "{uri} (used at {}) evicted while {u} (used at {}) stayed",
                v.last_used(), s.last_used()
            ));
        }
    }
    Ok(())
}
