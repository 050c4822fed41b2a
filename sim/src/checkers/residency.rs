//! History rules of sleep and eviction (Sessions page, "Sleep and wake"),
//! from the world's side: which connections subscribed, which turns the
//! clients were told started, which steps named which session.
//! Independent of the core's LRU stamps and `inv_*` rules.
//!
//! - `lru_eviction_order`: "Over that count the least recently used
//!   session goes first ... a session is used when it starts, when a client
//!   subscribes to it, and when a turn starts in it." The world keeps two
//!   step stamps per session: `lo`, the last step it was certainly used
//!   (it went live from starting, began to wake, a subscribe to it or its
//!   chat was answered in the frame's own step, or an accepted
//!   `chat/turnStarted` went out on one of its chats), and `hi`, the last
//!   step it may have been used (any step whose input or reply named it,
//!   whose phase moved, or that answered a handshake). A session evicted
//!   while another one, evictable before and after that step, has
//!   `hi < lo` of the evicted one is a wrong victim.
//! - `archived_goes_at_once`: "An archived session goes at once": with a
//!   residency limit, an archived session evictable before and after a
//!   step is not still resident after it.
//! - `no_sleep_while_watched`: "None goes while a client watches it": no
//!   session sleeps or is evicted (as the host logs it: `session.slept`,
//!   `session.evicted`; an agent that exits is not a sleep) in a step
//!   throughout which one
//!   connection was subscribed to it or to one of its chats.
//! - `no_sleep_while_busy`: "... or while it has work in hand": no session
//!   sleeps or is evicted with a turn running, a message queued or
//!   steering, or a question open in a step whose input was not about it
//!   (only its own inputs end that work); a session asleep after a step
//!   holds none of it.

use std::collections::{BTreeMap, BTreeSet};

use ahp_types::actions::StateAction;
use ahp_types::Uri;
use ahpd_core::invariants::Violation;
use ahpd_core::session::{Phase, Session};
use ahpd_core::{ConnId, Effect, HostView, Outbound};

fn breach(rule: &'static str, detail: String) -> Violation {
    Violation { rule, detail }
}

/// The session ids a text names: every `ahp-session` followed by `:/`,
/// `@` or `-` and an id (`ahp-session:/s3`, `ahp-chat:/ahp-session@s3`,
/// `ahp-chat:/ahp-session-s3-c1`).
pub fn named_ids(text: &str, out: &mut BTreeSet<String>) {
    // One searcher for the whole text (each `find` builds its own), and an
    // id is copied only when it is new: this reads every input and reply.
    for (at, _) in text.match_indices("ahp-session") {
        let rest = &text[at + "ahp-session".len()..];
        let tail = rest.strip_prefix(":/").or_else(|| rest.strip_prefix('@')).or_else(|| rest.strip_prefix('-'));
        if let Some(tail) = tail {
            let id = &tail[..tail.find(|c: char| !c.is_ascii_alphanumeric()).unwrap_or(tail.len())];
            if !id.is_empty() && !out.contains(id) {
                out.insert(id.to_owned());
            }
        }
    }
}

/// The id of a session URI (`ahp-session:/s3` → `s3`).
fn id_of(uri: &str) -> &str {
    uri.strip_prefix("ahp-session:/").unwrap_or(uri)
}

/// What a session was, as these rules need it, at one instant.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    /// Its phase's name.
    phase: &'static str,
    resident: bool,
    live: bool,
    asleep: bool,
    archived: bool,
    /// Evictable by the page: state held, something said, live or asleep,
    /// resumable, nothing in hand, nobody watching.
    evictable: bool,
    /// A turn running, a message queued or steering, a question open.
    chat_work: bool,
    /// Connections subscribed to it or one of its chats.
    watchers: BTreeSet<ConnId>,
}

fn chat_work(s: &Session) -> bool {
    s.resident().is_some_and(|r| {
        r.chats.values().any(|c| c.active_turn.is_some() || c.steering_message.is_some() || c.queued_messages.as_ref().is_some_and(|q| !q.is_empty()))
            || r.session.input_needed.as_ref().is_some_and(|i| !i.is_empty())
    })
}

/// Who watches which session, read once per instant from the connections
/// (rather than every connection's subscriptions once per session): the
/// connections subscribed to each session or one of its chats, and the
/// sessions a handshake waits for.
#[derive(Debug, Default)]
struct Watching<'v> {
    watchers: BTreeMap<&'v str, BTreeSet<ConnId>>,
    handshakes: BTreeSet<&'v str>,
}

impl<'v> Watching<'v> {
    fn of(view: &'v HostView<'_>) -> Watching<'v> {
        let mut w = Watching::default();
        for (id, c) in view.conns {
            for channel in &c.subscriptions {
                // A chat is its session's (the chat index is checked to
                // match the records by `inv_chat_index_consistent`).
                let session = if view.sessions.contains_key(channel) { Some(channel.as_str()) } else { view.chats.get(channel).map(|u| &**u) };
                if let Some(session) = session {
                    w.watchers.entry(session).or_default().insert(*id);
                }
            }
            if let Some(h) = &c.handshake {
                w.handshakes.extend(h.sessions.iter().map(String::as_str));
            }
        }
        w
    }
}

/// Every session's [`Seen`] at one instant.
fn seen_all(view: &HostView<'_>) -> BTreeMap<Uri, Seen> {
    let watching = Watching::of(view);
    view.sessions.iter().map(|(u, s)| (u.clone(), seen(&watching, u, s))).collect()
}

fn seen(watching: &Watching<'_>, uri: &Uri, s: &Session) -> Seen {
    let watchers = watching.watchers.get(uri.as_str()).cloned().unwrap_or_default();
    let held_by_handshake = watching.handshakes.contains(uri.as_str());
    let work = chat_work(s);
    // A chat's agent still starting in a live session is in hand too (its
    // answer names the conversation a wake resumes).
    let starting_chat = matches!(s.phase(), Phase::Live { starting } if !starting.is_empty());
    let in_hand = work || s.is_busy() || !s.work().sends_in_flight.is_empty() || s.work().parked.is_some() || !s.work().inbox.is_empty() || !s.work().waiters.is_empty() || !s.work().git_ops.is_empty() || starting_chat;
    let live = s.phase().is_live();
    let asleep = s.is_asleep();
    Seen {
        phase: s.phase().name(),
        resident: s.resident().is_some(),
        live,
        asleep,
        archived: s.record().is_archived,
        evictable: s.resident().is_some()
            && s.is_announced()
            && (live || asleep)
            && s.record().provider != "oneshot"
            && !in_hand
            && watchers.is_empty()
            && !held_by_handshake,
        chat_work: work,
        watchers,
    }
}

/// What the rules remember between steps.
#[derive(Debug, Clone, Default)]
pub struct Residency {
    /// The residency limit (0 = off).
    limit: usize,
    /// Per session: (lo, hi) step stamps, see the module docs.
    stamps: BTreeMap<Uri, (u64, u64)>,
    step: u64,
    /// Every session as the previous step left it: the next step's
    /// before-view (nothing moves the host between two inputs).
    last: Option<BTreeMap<Uri, Seen>>,
    /// Evictions judged against another evictable session (coverage).
    pub victims_judged: u64,
    /// Sleeps and evictions judged (coverage).
    pub let_go_judged: u64,
}

/// A step's before-view.
#[derive(Debug, Clone, Default)]
pub struct ResidencyBefore {
    sessions: BTreeMap<Uri, Seen>,
    /// Session ids the step's input named.
    named: BTreeSet<String>,
    /// The session the input was about (an agent's event, an op's answer).
    subject: Option<Uri>,
    /// A `subscribe` frame: its connection, id and channel.
    subscribe: Option<(ConnId, u64, Uri)>,
}

impl Residency {
    /// The rules for residency limit `limit`.
    pub fn new(limit: usize) -> Residency {
        Residency { limit, ..Residency::default() }
    }

    /// A host (re)started: every session's stamps are this step's, so no
    /// order is claimed between sessions used by another process.
    pub fn on_host_start(&mut self, view: &HostView<'_>) {
        let step = self.step;
        self.stamps = view.sessions.iter().map(|(u, _)| (u.clone(), (step, step))).collect();
        self.last = None;
    }

    /// Before `Host::handle`: the sessions' view and what the input names.
    pub fn before_step(&mut self, view: &HostView<'_>, input_text: &str, subject: Option<Uri>, subscribe: Option<(ConnId, u64, Uri)>) -> ResidencyBefore {
        self.step += 1;
        let mut named = BTreeSet::new();
        named_ids(input_text, &mut named);
        ResidencyBefore {
            sessions: self.last.take().unwrap_or_else(|| seen_all(view)),
            named,
            subject,
            subscribe,
        }
    }

    /// After the step: stamps, then the rules.
    /// `texts` holds each `Send` effect's message as written on the wire.
    pub fn after_step(&mut self, view: &HostView<'_>, before: &ResidencyBefore, effects: &[Effect], texts: &[Option<String>]) -> Result<(), Violation> {
        let step = self.step;
        let session_of = |channel: &str| -> Option<Uri> {
            if view.sessions.contains_key(channel) {
                Some(channel.to_owned())
            } else {
                view.chats.get(channel).map(|u| u.to_string())
            }
        };
        // Certain uses this step, and what the replies named.
        let mut used: BTreeSet<Uri> = BTreeSet::new();
        let mut named = before.named.clone();
        let mut everything = false;
        // Sessions whose running turns the host itself cancelled this step
        // (a graceful stop's grace ran out): their work ended in it.
        let host_cancelled: BTreeSet<Uri> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::Backend { chat, command: ahpd_core::BackendCmd::Cancel { .. }, .. } => session_of(chat),
                _ => None,
            })
            .collect();
        for (e, text) in effects.iter().zip(texts) {
            let Effect::Send { conn, message } = e else { continue };
            let text = || -> std::borrow::Cow<'_, str> {
                match text {
                    Some(t) => std::borrow::Cow::Borrowed(t.as_str()),
                    None => std::borrow::Cow::Owned(message.to_json()),
                }
            };
            match message {
                Outbound::Action(env) => {
                    if let Some(s) = session_of(&env.channel) {
                        named.insert(id_of(&s).to_owned());
                        if env.rejection_reason.is_none() && matches!(env.action, StateAction::ChatTurnStarted(_)) {
                            used.insert(s);
                        }
                    }
                }
                Outbound::Result { id, .. } => {
                    if let Some((c, rid, channel)) = &before.subscribe {
                        if c == conn && rid == id {
                            if let Some(s) = session_of(channel) {
                                used.insert(s);
                            }
                        }
                    }
                    let text = text();
                    // A handshake's answer may touch every session it named.
                    everything |= text.contains("\"snapshots\"") || text.contains("\"missing\"");
                    named_ids(&text, &mut named);
                }
                // The whole frame names what its params name.
                Outbound::Notification { .. } => named_ids(&text(), &mut named),
                Outbound::Error { .. } => {}
            }
        }
        for (uri, s) in view.sessions {
            let was = before.sessions.get(uri).map(|b| b.phase);
            let now = s.phase().name();
            if was != Some(now) {
                named.insert(id_of(uri).to_owned());
                let started = was == Some("starting") && s.phase().is_live();
                if started || (was == Some("asleep") && matches!(s.phase(), Phase::Waking(_) | Phase::Live { .. })) {
                    used.insert(uri.clone());
                }
            }
        }
        if let Some(s) = &before.subject {
            named.insert(id_of(s).to_owned());
        }
        self.stamps.retain(|u, _| view.sessions.contains_key(u));
        for (uri, _) in view.sessions {
            let stamp = self.stamps.entry(uri.clone()).or_insert((step, step));
            if everything || named.contains(id_of(uri)) {
                stamp.1 = step;
            }
            if used.contains(uri) {
                *stamp = (step, step);
            }
        }
        let after = seen_all(view);
        // What the host says it let go this step (an agent that exited, a
        // failed creation or wake is not a sleep).
        let mut let_go: BTreeMap<&Uri, &'static str> = BTreeMap::new();
        for e in effects {
            if let Effect::Log(l) = e {
                if let (Some(uri), "session.slept" | "session.evicted") = (&l.session, l.event) {
                    let_go.insert(uri, l.event);
                }
            }
        }
        for (uri, b) in &before.sessions {
            let Some(a) = after.get(uri) else { continue };
            let evicted = let_go.get(uri) == Some(&"session.evicted");
            let slept = let_go.get(uri) == Some(&"session.slept") && a.asleep;
            if !evicted && !slept {
                continue;
            }
            let how = if evicted { "evicted" } else { "slept" };
            self.let_go_judged += 1;
            if let Some(c) = b.watchers.intersection(&a.watchers).next() {
                return Err(breach("no_sleep_while_watched", format!("{uri} {how} while connection {} was subscribed throughout", c.0)));
            }
            if b.chat_work && before.subject.as_ref() != Some(uri) && !before.named.contains(id_of(uri)) && !host_cancelled.contains(uri) {
                return Err(breach("no_sleep_while_busy", format!("{uri} {how} with a turn, a queued message or a question in hand")));
            }
            if slept && a.chat_work {
                return Err(breach("no_sleep_while_busy", format!("{uri} is asleep with work in hand")));
            }
            if evicted && !b.archived && !a.archived {
                let lo = self.stamps.get(uri).map_or(0, |s| s.0);
                self.victims_judged += u64::from(before.sessions.iter().any(|(o, ob)| o != uri && ob.evictable));
                for (other, ob) in &before.sessions {
                    let Some(oa) = after.get(other) else { continue };
                    let hi = self.stamps.get(other).map_or(u64::MAX, |s| s.1);
                    if other != uri && ob.evictable && oa.evictable && !ob.archived && !oa.archived && hi < lo {
                        return Err(breach("lru_eviction_order", format!(
                            "{uri} (used at step {lo}) was evicted while {other} (last possibly used at step {hi}) was evictable and stays"
                        )));
                    }
                }
            }
        }
        if self.limit > 0 {
            for (uri, a) in &after {
                if a.archived && a.evictable && before.sessions.get(uri).is_some_and(|b| b.archived && b.evictable) {
                    return Err(breach("archived_goes_at_once", format!("{uri} is archived, evictable and still resident")));
                }
            }
        }
        self.last = Some(after);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `named_ids` as it was first written, one `find` at a time.
    fn named_ids_by_find(text: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        let mut rest = text;
        while let Some(at) = rest.find("ahp-session") {
            rest = &rest[at + "ahp-session".len()..];
            let tail = rest.strip_prefix(":/").or_else(|| rest.strip_prefix('@')).or_else(|| rest.strip_prefix('-'));
            if let Some(tail) = tail {
                let id: String = tail.chars().take_while(|c| c.is_ascii_alphanumeric()).collect();
                if !id.is_empty() {
                    out.insert(id);
                }
            }
        }
        out
    }

    #[test]
    fn named_ids_reads_as_find_did() {
        for text in [
            r#"{"channel":"ahp-session:/s3","chat":"ahp-chat:/ahp-session@s3","x":"ahp-chat:/ahp-session-s12-c1"}"#,
            "ahp-session:/s1 ahp-session:/s1 ahp-session:/ ahp-session ahp-session:/é ahp-session@ab9é ahp-session-ahp-session-x",
            "ahp-sessionahp-session:/q ahp-session:/s2",
            "",
            "no session here: ahp-sessio",
        ] {
            let mut out = BTreeSet::new();
            named_ids(text, &mut out);
            assert_eq!(out, named_ids_by_find(text), "{text}");
        }
    }
}
