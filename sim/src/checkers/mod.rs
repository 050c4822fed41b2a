//! History rules that need the world, run after every step beside the
//! core's own state rules (`ahpd_core::invariants::check_all`).
//!
//! - `rule1_server_seq_increases`: checked by each client as envelopes
//!   arrive (see `clients.rs`).
//! - `rule2_one_reply_per_request`: clients check each reply against their
//!   outstanding ids; [`unanswered`] names what is still owed at the end.
//! - `rule3_mirror_matches_host`: [`check_mirrors`], at quiescent points.
//! - `root_rows_match_listing`: [`check_rows`], at the same points.
//! - `rule4_announce_order`: no `root/sessionRemoved` for a session never
//!   announced, no second `root/sessionAdded`, `root/sessionAdded` before
//!   `session/ready` (Sessions page, "The life of a session").
//! - `rule5_restart_keeps_acked`: [`check_restart`], after every crash.
//! - `echoed_turn_kept`: a turn the host took (echoed) is in its chat's
//!   history from then on, across sleep, eviction, crash and restart
//!   ([`History::after_step`]; issue 19, `ahpd_core::kept_turns`).
//! - `completed_turn_stays_complete`: a turn a chat showed completed shows
//!   completed from then on, across sleep, eviction, crash and restart,
//!   though the write of its end was durable only with the next write
//!   (issue 21, `Durability::WithNext`): its agent's history has it.
//! - `lifecycle_transition`: every phase change is in the core's legal
//!   table (sled's verifier), using the previous step's phases.

pub mod grants;
pub mod residency;
pub mod awareness;
pub mod trees;
pub mod queue;
pub mod resume;
pub mod questions;

use std::collections::{BTreeMap, BTreeSet};

use ahp_types::actions::StateAction;
use ahp_types::state::{SessionConfigState, SessionState, TurnState};
use ahp_types::{Uri, ROOT_RESOURCE_URI};
use ahpd_core::invariants::Violation;
use ahpd_core::session::lifecycle;
use ahpd_core::session::Phase;
use ahpd_core::{ConnId, Effect, HostView, Outbound, SessionRecord};

use crate::clients::{Client, MirrorState};
use crate::queue::Queue;
use crate::store::Store;

fn breach(rule: &'static str, detail: String) -> Violation {
    Violation { rule, detail }
}

/// What the history checker remembers between steps.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// Sessions announced by the current host incarnation and not removed.
    announced: BTreeSet<Uri>,
    /// Each session's phase after the previous step.
    prev_phases: BTreeMap<Uri, Phase>,
    /// How many times each URI was removed from the host (for page walks).
    pub incarnations: BTreeMap<Uri, u64>,
    added_this_step: BTreeSet<Uri>,
    /// Every turn id each chat's state has shown (running or ended), by
    /// session and chat, while the session exists (a URI made anew starts
    /// empty).
    echoed: BTreeMap<Uri, BTreeMap<Uri, BTreeSet<String>>>,
    /// Of those, the turns shown completed (`completed_turn_stays_complete`).
    completed: BTreeMap<Uri, BTreeMap<Uri, BTreeSet<String>>>,
    /// The turns a rewind (`chat/truncated`) took away, by session and
    /// chat (issue 23): never shown again, across sleep, eviction and
    /// restarts.
    rewound: BTreeMap<Uri, BTreeMap<Uri, BTreeSet<String>>>,
    removed_this_step: BTreeSet<Uri>,
    ready_unannounced: Vec<Uri>,
    /// Every acknowledged queued message's fate (`queued_message_once`).
    queued: queue::QueueHistory,
    resumed: resume::ResumeHistory,
    /// Every question completed and answered (`question_answered_once`).
    questions: questions::QuestionHistory,
}

/// What the checker needs from before a step.
#[derive(Debug, Clone, Default)]
pub struct Before {
    root_subscribers: BTreeSet<ConnId>,
    /// The core's snapshot for its step rules
    /// (`ahpd_core::invariants::check_step`).
    core: ahpd_core::invariants::Before,
    /// The step answers a transcript scan (sessions may appear asleep).
    pub scan: bool,
}

fn root_subscribers(view: &HostView<'_>) -> BTreeSet<ConnId> {
    view.conns.iter().filter(|(_, c)| c.subscriptions.contains(ROOT_RESOURCE_URI)).map(|(id, _)| *id).collect()
}

impl History {
    /// A host (re)started: restored sessions count as announced.
    pub fn on_host_start(&mut self, view: &HostView<'_>) -> Result<(), Violation> {
        self.queued.on_host_start(view)?;
        self.resumed.on_host_start();
        self.questions.on_host_start();
        self.announced = view.sessions.iter().filter(|(_, s)| s.is_announced()).map(|(u, _)| u.clone()).collect();
        self.prev_phases = view.sessions.iter().map(|(u, s)| (u.clone(), s.phase().shallow())).collect();
        Ok(())
    }

    /// Notes what the step's checks compare against.
    pub fn before_step(&mut self, view: &HostView<'_>) -> Before {
        self.added_this_step.clear();
        self.removed_this_step.clear();
        self.ready_unannounced.clear();
        Before { root_subscribers: root_subscribers(view), core: ahpd_core::invariants::before(view), scan: false }
    }

    /// Rule 4, on each effect in the order the host returned them.
    pub fn on_effect(&mut self, effect: &Effect) -> Result<(), Violation> {
        self.queued.on_effect(effect)?;
        self.resumed.on_effect(effect)?;
        self.questions.on_effect(effect)?;
        let Effect::Send { message, .. } = effect else { return Ok(()) };
        match message {
            Outbound::Notification { method: "root/sessionAdded", params } => {
                let uri = params.pointer("/summary/resource").and_then(|v| v.as_str()).unwrap_or_default().to_owned();
                if self.added_this_step.contains(&uri) {
                    return Ok(());
                }
                if !self.announced.insert(uri.clone()) {
                    return Err(breach("rule4_announce_order", format!("root/sessionAdded for {uri}, which was already announced")));
                }
                self.added_this_step.insert(uri);
            }
            Outbound::Notification { method: "root/sessionRemoved", params } => {
                let uri = params.get("session").and_then(|v| v.as_str()).unwrap_or_default().to_owned();
                if self.removed_this_step.contains(&uri) {
                    return Ok(());
                }
                if !self.announced.remove(&uri) {
                    return Err(breach("rule4_announce_order", format!("root/sessionRemoved for {uri}, which was never announced")));
                }
                self.removed_this_step.insert(uri);
            }
            Outbound::Action(envelope)
                if matches!(envelope.action, StateAction::SessionReady(_))
                    && envelope.rejection_reason.is_none()
                    && !self.announced.contains(&envelope.channel) =>
            {
                self.ready_unannounced.push(envelope.channel.clone());
            }
            _ => {}
        }
        Ok(())
    }

    /// After a step: the core's state rules, the lifecycle table, and the
    /// parts of rule 4 that need the state after the step.
    pub fn after_step(&mut self, view: &HostView<'_>, before: &Before) -> Result<(), Violation> {
        // Per-session rules on the sessions the input touched: the others
        // passed before and did not change (`--verify-touched` checks that).
        self.resumed.after_step(view)?;
        ahpd_core::invariants::check_touched(view)?;
        // "createdAt ... never moves", "modifiedAt ... moves forward only"
        // (a wall clock that jumps backwards never moves it back: the
        // sim's clock jumps are among its faults), and who may go.
        ahpd_core::invariants::check_step(&before.core, view)?;
        // Phases, announcements and removals move only for the sessions the
        // input touched (every session when it touched them all).
        let scope: Vec<Uri> = match view.sessions.touched() {
            Some(touched) => touched.into_iter().cloned().collect(),
            None => self.prev_phases.keys().chain(view.sessions.iter().map(|(u, _)| u)).cloned().collect::<BTreeSet<Uri>>().into_iter().collect(),
        };
        for uri in &scope {
            let Some(prev) = self.prev_phases.get(uri) else { continue };
            match view.sessions.get(uri) {
                // A refused dispose leaves the session asleep, and the same
                // input may wake it for what the dispose held back (a
                // child's finish, `Fact::DisposeRefused`): two moves of the
                // table in one step.
                Some(s) if s.phase().shallow() != *prev
                    && !lifecycle::is_legal(prev, s.phase())
                    && !(matches!(prev, Phase::Disposing(_)) && lifecycle::is_legal(&Phase::Asleep, s.phase())) =>
                {
                    return Err(breach("lifecycle_transition", format!("{uri}: {} -> {} is not in the table", prev.name(), s.phase().name())));
                }
                None if !matches!(prev, Phase::Starting(_) | Phase::Disposing(_)) => {
                    return Err(breach("lifecycle_transition", format!("{uri} vanished from {}", prev.name())));
                }
                _ => {}
            }
        }
        for uri in &scope {
            let Some(s) = view.sessions.get(uri) else { continue };
            let rediscovered = before.scan && s.is_asleep();
            if !self.prev_phases.contains_key(uri) && !matches!(s.phase(), Phase::Starting(_)) && !rediscovered {
                return Err(breach("lifecycle_transition", format!("{uri} appeared as {}", s.phase().name())));
            }
        }
        for uri in &scope {
            match view.sessions.get(uri) {
                None => {
                    if self.prev_phases.remove(uri).is_some() {
                        *self.incarnations.entry(uri.clone()).or_default() += 1;
                        // Removed with no root subscriber to tell: no
                        // notification to see.
                        self.announced.remove(uri);
                    }
                }
                Some(s) => {
                    if s.is_announced() {
                        self.announced.insert(uri.clone());
                    }
                    self.prev_phases.insert(uri.clone(), s.phase().shallow());
                }
            }
        }
        let after = root_subscribers(view);
        let watched_throughout = before.root_subscribers.intersection(&after).next().is_some();
        if let Some(uri) = self.ready_unannounced.first() {
            if watched_throughout || !view.sessions.get(uri).is_some_and(|s| s.is_announced()) {
                return Err(breach("rule4_announce_order", format!("session/ready for {uri} before root/sessionAdded")));
            }
        }
        self.queued.forget_gone(view);
        self.queued.after_step(view);
        self.check_echoed_turns(view)
    }

    /// "An echoed turn is durable history from its echo on" (issue 19): a
    /// chat's state, whenever the host holds it, shows every turn it ever
    /// showed, ended or running (for an agent that can resume).
    fn check_echoed_turns(&mut self, view: &HostView<'_>) -> Result<(), Violation> {
        self.echoed.retain(|uri, _| view.sessions.get(uri).is_some_and(|s| !matches!(s.phase(), Phase::Starting(_))));
        for chats in self.echoed.values_mut() {
            chats.retain(|chat, _| view.chats.contains_key(chat));
        }
        self.rewound.retain(|uri, _| view.sessions.get(uri).is_some_and(|s| !matches!(s.phase(), Phase::Starting(_))));
        for chats in self.rewound.values_mut() {
            chats.retain(|chat, _| view.chats.contains_key(chat));
        }
        self.completed.retain(|uri, _| view.sessions.get(uri).is_some_and(|s| !matches!(s.phase(), Phase::Starting(_))));
        for chats in self.completed.values_mut() {
            chats.retain(|chat, _| view.chats.contains_key(chat));
        }
        // A chat moved to another session (`moveChat`, issue 23) takes what
        // it showed with it: its turns must still be shown there.
        follow_moved_chats(&mut self.echoed, view);
        follow_moved_chats(&mut self.rewound, view);
        follow_moved_chats(&mut self.completed, view);
        // A session no input touched shows what it showed when last checked.
        let touched = view.sessions.touched();
        let sessions: Box<dyn Iterator<Item = (&Uri, &ahpd_core::session::Session)>> = match touched {
            Some(uris) => Box::new(uris.into_iter().filter_map(|u| view.sessions.get_key_value(u))),
            None => Box::new(view.sessions.iter()),
        };
        for (uri, s) in sessions {
            // An agent that cannot resume starts every wake afresh: its
            // history is its own to lose (Sessions page, "Waking").
            // A turn a rewind took away (its record owes the backend its
            // forget from the rewind's write on, which is the input that
            // applies it, whether or not the state is still held after it)
            // is not lost: it is one the chat must never show again (issue
            // 23).
            for rec in s.record().chats.iter().filter(|c| !c.forgetting.is_empty()) {
                let Some(seen) = self.echoed.get_mut(uri).and_then(|m| m.get_mut(&rec.resource)) else { continue };
                let gone = self.rewound.entry(uri.clone()).or_default().entry(rec.resource.clone()).or_default();
                for id in &rec.forgetting {
                    if seen.remove(id) {
                        gone.insert(id.clone());
                    }
                }
                if let Some(done) = self.completed.get_mut(uri).and_then(|m| m.get_mut(&rec.resource)) {
                    done.retain(|id| !rec.forgetting.contains(id));
                }
            }
            let Some(r) = s.resident().filter(|_| s.can_resume()) else { continue };
            for (chat, state) in &r.chats {
                let shown: BTreeSet<&str> = state.turns.iter().map(|t| t.id.as_str()).chain(state.active_turn.as_ref().map(|t| t.id.as_str())).collect();
                let seen = self.echoed.entry(uri.clone()).or_default().entry(chat.clone()).or_default();
                let gone = self.rewound.entry(uri.clone()).or_default().entry(chat.clone()).or_default();
                if let Some(back) = shown.iter().find(|id| gone.contains(**id)) {
                    return Err(breach("rewound_turn_stays_gone", format!("{chat} shows turn {back} again after a rewind took it away")));
                }
                if let Some(lost) = seen.iter().find(|id| !shown.contains(id.as_str())) {
                    return Err(breach("echoed_turn_kept", format!("{chat} no longer shows turn {lost} (shows {shown:?})")));
                }
                seen.extend(shown.into_iter().map(str::to_owned));
                let done = self.completed.entry(uri.clone()).or_default().entry(chat.clone()).or_default();
                if let Some(undone) = done.iter().find(|id| state.turns.iter().any(|t| t.id == **id && t.state != TurnState::Complete)) {
                    return Err(breach("completed_turn_stays_complete", format!("{chat} shows turn {undone}, which it showed completed, in another state")));
                }
                done.extend(state.turns.iter().filter(|t| t.state == TurnState::Complete).map(|t| t.id.clone()));
            }
        }
        Ok(())
    }
}

/// Re-files each chat of `by_session` (turn ids by session, then chat)
/// under the session the host's chat index names for it now, merging with
/// what is there: a chat moved (`moveChat`) keeps its history.
fn follow_moved_chats(by_session: &mut BTreeMap<Uri, BTreeMap<Uri, BTreeSet<String>>>, view: &HostView<'_>) {
    let mut moved = Vec::new();
    for (uri, chats) in by_session.iter_mut() {
        let away: Vec<Uri> = chats.keys().filter(|c| view.chats.get(c.as_str()).is_some_and(|owner| &**owner != uri.as_str())).cloned().collect();
        for chat in away {
            if let (Some(seen), Some(owner)) = (chats.remove(&chat), view.chats.get(chat.as_str())) {
                moved.push((owner.to_string(), chat, seen));
            }
        }
    }
    for (owner, chat, seen) in moved {
        by_session.entry(owner).or_default().entry(chat).or_default().extend(seen);
    }
}

/// The host's own state of `channel`, when it holds it.
fn host_state(view: &HostView<'_>, channel: &str) -> Option<MirrorState> {
    if channel == ROOT_RESOURCE_URI {
        return Some(MirrorState::Root(Box::new(view.root.clone())));
    }
    if let Some(s) = view.sessions.get(channel) {
        return s.resident().map(|r| MirrorState::Session(Box::new(session_as_sent(s, &r.session))));
    }
    let session = view.chats.get(channel)?;
    let r = view.sessions.get(session)?.resident()?;
    r.chats.get(channel).map(|c| MirrorState::Chat(Box::new(c.clone())))
}

/// A session's state as its snapshots carry it: the host's own, with the
/// `config` the snapshot writer fills in from the record.
fn session_as_sent(session: &ahpd_core::session::Session, state: &ahp_types::state::SessionState) -> ahp_types::state::SessionState {
    let mut state = state.clone();
    if let Some(config) = ahpd_core::session::state::session_config(session.record()) {
        state.config = serde_json::from_value(config).ok();
    }
    state
}

fn equal(view: &HostView<'_>, channel: &str, mirror: &MirrorState, configs: &mut ConfigCache) -> Option<bool> {
    if channel == ROOT_RESOURCE_URI {
        return Some(matches!(mirror, MirrorState::Root(r) if **r == *view.root));
    }
    if let Some(s) = view.sessions.get(channel) {
        let r = s.resident()?;
        let MirrorState::Session(m) = mirror else { return Some(false) };
        return Some(session_equal(m, &r.session, configs.config_of(s.record())));
    }
    let session = view.chats.get(channel)?;
    let r = view.sessions.get(session)?.resident()?;
    let c = r.chats.get(channel)?;
    Some(matches!(mirror, MirrorState::Chat(m) if **m == *c))
}

/// A session's `config` as its snapshots carry it, cached by what it is
/// made of (the record's offer, scope, provider and values) so a mirror
/// check does not compose it again on every step.
#[derive(Debug, Clone, Default)]
pub struct ConfigCache {
    by_uri: BTreeMap<Uri, (ConfigInputs, Option<Option<SessionConfigState>>)>,
}

type ConfigInputs = (Option<Box<ahpd_core::session_config::ConfigOffer>>, Option<String>, ahpd_core::record::Text, serde_json::Map<String, serde_json::Value>);

impl ConfigCache {
    /// The config the snapshot writer fills in from `record`: `None` when
    /// it leaves the state's own (no offer recorded).
    fn config_of(&mut self, record: &SessionRecord) -> Option<Option<&SessionConfigState>> {
        let fresh = match self.by_uri.get(&record.resource) {
            Some((inputs, _)) => inputs.0 != record.offer || inputs.1.as_deref() != record.scope.as_deref() || inputs.2 != record.provider || inputs.3 != *record.config,
            None => true,
        };
        if fresh {
            let config = ahpd_core::session::state::session_config(record).map(|c| serde_json::from_value(c).ok());
            let inputs = (record.offer.clone(), record.scope.as_deref().map(str::to_owned), record.provider.clone(), (*record.config).clone());
            self.by_uri.insert(record.resource.clone(), (inputs, config));
        }
        self.by_uri.get(&record.resource).and_then(|(_, c)| c.as_ref().map(Option::as_ref))
    }
}

/// The mirror of a session equals the host's state with `config` as the
/// snapshot writer fills it in. Every field is named (no `..`) so a field
/// ahp-types adds is compared, not skipped.
fn session_equal(mirror: &SessionState, host: &SessionState, config: Option<Option<&SessionConfigState>>) -> bool {
    let SessionState {
        provider,
        title,
        status,
        activity,
        origin,
        project,
        working_directories,
        annotations,
        lifecycle,
        creation_error,
        server_tools,
        active_clients,
        chats,
        default_chat,
        config: mirror_config,
        customizations,
        changesets,
        input_needed,
        meta,
    } = mirror;
    let host_config = config.unwrap_or(host.config.as_ref());
    *provider == host.provider
        && *title == host.title
        && *status == host.status
        && *activity == host.activity
        && *origin == host.origin
        && *project == host.project
        && *working_directories == host.working_directories
        && *annotations == host.annotations
        && *lifecycle == host.lifecycle
        && *creation_error == host.creation_error
        && *server_tools == host.server_tools
        && *active_clients == host.active_clients
        && *chats == host.chats
        && *default_chat == host.default_chat
        && mirror_config.as_ref() == host_config
        && *customizations == host.customizations
        && *changesets == host.changesets
        && *input_needed == host.input_needed
        && *meta == host.meta
}

/// The first JSON path where two values differ, with both sides.
pub fn first_difference(a: &serde_json::Value, b: &serde_json::Value, path: &str) -> Option<String> {
    use serde_json::Value;
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let (va, vb) = (x.get(k).unwrap_or(&Value::Null), y.get(k).unwrap_or(&Value::Null));
                if let Some(d) = first_difference(va, vb, &format!("{path}/{k}")) {
                    return Some(d);
                }
            }
            None
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            x.iter().zip(y).enumerate().find_map(|(i, (va, vb))| first_difference(va, vb, &format!("{path}/{i}")))
        }
        _ if a == b => None,
        _ => {
            let short = |v: &Value| v.to_string().chars().take(300).collect::<String>();
            Some(format!("at {path}: client {} / host {}", short(a), short(b)))
        }
    }
}

fn to_json(state: &MirrorState) -> serde_json::Value {
    match state {
        MirrorState::Root(r) => serde_json::to_value(r),
        MirrorState::Session(s) => serde_json::to_value(s),
        MirrorState::Chat(c) => serde_json::to_value(c),
    }
    .unwrap_or_default()
}

/// Which of a client's mirrors may differ from the host's state since they
/// were last compared equal: the host's side moves when an input touches
/// the session (`SessionTable::touched`) or the root, the client's when it
/// takes a frame. A mirror that could not be compared yet (something in
/// flight to the client) stays stale until it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stale {
    /// Every mirror.
    All,
    /// These channels.
    Some(BTreeSet<Uri>),
}

impl Default for Stale {
    fn default() -> Stale {
        Stale::Some(BTreeSet::new())
    }
}

impl Stale {
    /// Marks every mirror stale.
    pub fn all(&mut self) {
        *self = Stale::All;
    }

    /// Marks the root and the channels of the sessions an input touched
    /// (each session and its chats) stale; every mirror when the input
    /// touched every session.
    pub fn touched(&mut self, view: &HostView<'_>, touched: Option<&[&Uri]>) {
        let (Some(touched), Stale::Some(set)) = (touched, &mut *self) else {
            *self = Stale::All;
            return;
        };
        set.insert(ROOT_RESOURCE_URI.to_owned());
        for uri in touched {
            set.insert((*uri).clone());
            if let Some(s) = view.sessions.get(*uri) {
                set.extend(s.record().chats.iter().map(|c| c.resource.clone()));
            }
        }
    }

    fn is_empty(&self) -> bool {
        matches!(self, Stale::Some(set) if set.is_empty())
    }
}

/// Rule 3: every full mirror of a channel the host still sends to that
/// client equals the host's own state, for clients with nothing in flight
/// to them (a quiescent point for that connection). Only the mirrors
/// `stale` names are compared (the rest were compared equal and neither
/// side moved since), and those compared are no longer stale. Returns how
/// many mirrors were compared.
pub fn check_mirrors(view: &HostView<'_>, clients: &[Client], q: &Queue, configs: &mut ConfigCache, stale: &mut [Stale]) -> Result<u64, Violation> {
    let mut compared = 0;
    for (client, stale) in clients.iter().zip(stale.iter_mut()) {
        if stale.is_empty() {
            continue;
        }
        let Some(conn) = client.conn else { continue };
        if !client.ready || q.inflight_to_conn.contains_key(&conn) {
            continue;
        }
        let Some(host_conn) = view.conns.get(&conn) else { continue };
        let mirrors: Box<dyn Iterator<Item = (&Uri, &crate::clients::Mirror)>> = match &*stale {
            Stale::All => Box::new(client.mirrors.iter()),
            Stale::Some(set) => Box::new(set.iter().filter_map(|c| client.mirrors.get_key_value(c))),
        };
        for (channel, mirror) in mirrors {
            if !mirror.full || !host_conn.subscriptions.contains(channel) {
                continue;
            }
            let same = equal(view, channel, &mirror.state, configs);
            compared += u64::from(same.is_some());
            if same == Some(false) {
                let host = host_state(view, channel).map(|s| to_json(&s)).unwrap_or_default();
                let diff = first_difference(&to_json(&mirror.state), &host, "").unwrap_or_else(|| "(typed values differ, JSON equal)".to_owned());
                return Err(breach("rule3_mirror_matches_host", format!("client {} mirror of {channel} differs {diff}", client.index)));
            }
        }
        *stale = Stale::default();
    }
    Ok(compared)
}

/// `root_rows_match_listing` (issue 19: "its clients keep a mirror of
/// every row from `listSessions` + root notifications and the checker
/// compares it with a fresh listing after every step (a missed broadcast
/// fails a seed)"): for each client with rows, subscribed to the root and
/// with nothing in flight to it, its rows are those a `listSessions` now
/// would answer ([`HostView::fresh_listing`]), field by field. `agreed`
/// holds, per client, the listing its rows last matched: while its rows
/// have not moved (the world clears it when the client takes a frame) and
/// the listing's text is the same, the verdict is the same and nothing is
/// parsed again. Returns how many clients were compared.
pub fn check_rows(view: &HostView<'_>, clients: &[Client], q: &Queue, agreed: &mut [Option<String>]) -> Result<u64, Violation> {
    let mut text: Option<String> = None;
    let mut fresh: Option<BTreeMap<String, serde_json::Value>> = None;
    let mut compared = 0;
    for (client, agreed) in clients.iter().zip(agreed.iter_mut()) {
        let Some(conn) = client.conn else { continue };
        let Some(rows) = client.current_rows() else { continue };
        if !client.ready || q.inflight_to_conn.contains_key(&conn) {
            continue;
        }
        if !view.conns.get(&conn).is_some_and(|c| c.subscriptions.contains(ROOT_RESOURCE_URI)) {
            continue;
        }
        if text.is_none() {
            let Ok(listing) = view.fresh_listing() else { return Ok(compared) };
            if listing.overflowed {
                // More rows than one page holds: no client has all of them.
                return Ok(compared);
            }
            text = Some(listing.page.get().to_owned());
        }
        let Some(page_text) = text.as_ref() else { continue };
        compared += 1;
        if agreed.as_ref() == Some(page_text) {
            continue;
        }
        if fresh.is_none() {
            let page: serde_json::Value = serde_json::from_str(page_text).unwrap_or_default();
            let items = page.get("items").and_then(|v| v.as_array()).cloned().unwrap_or_default();
            fresh = Some(items.into_iter().filter_map(|r| Some((r.get("resource")?.as_str()?.to_owned(), r))).collect());
        }
        let Some(listed) = fresh.as_ref() else { continue };
        if rows == listed {
            *agreed = Some(page_text.clone());
            continue;
        }
        let missing = listed.keys().find(|u| !rows.contains_key(*u));
        let extra = rows.keys().find(|u| !listed.contains_key(*u));
        let detail = match (missing, extra) {
            (Some(u), _) => format!("lacks the row of {u}"),
            (None, Some(u)) => format!("still has a row for {u}, which a listing no longer shows"),
            (None, None) => {
                let (uri, row) = rows.iter().find(|(u, r)| listed.get(*u) != Some(*r)).map(|(u, r)| (u.clone(), r.clone())).unwrap_or_default();
                let want = listed.get(&uri).cloned().unwrap_or_default();
                let diff = first_difference(&row, &want, "").unwrap_or_default();
                format!("row {uri} differs from a fresh listing {diff}")
            }
        };
        return Err(breach("root_rows_match_listing", format!("client {}: {detail}", client.index)));
    }
    Ok(compared)
}

/// `--verify-incremental`: the sessions an input did not report touched
/// are as they were before it, and every session it added is reported, so
/// the checks that look only at touched sessions miss nothing.
pub fn verify_touched(view: &HostView<'_>, before: &[(Uri, ahpd_core::session::Session)]) -> Result<(), Violation> {
    let Some(touched) = view.sessions.touched() else { return Ok(()) };
    let touched: BTreeSet<&Uri> = touched.into_iter().collect();
    for (uri, s) in before {
        if touched.contains(uri) {
            continue;
        }
        if view.sessions.get(uri) != Some(s) {
            return Err(breach("touched_set_complete", format!("{uri} changed but the session table does not report it touched")));
        }
    }
    let known: BTreeSet<&Uri> = before.iter().map(|(u, _)| u).collect();
    if let Some((uri, _)) = view.sessions.iter().find(|(u, _)| !known.contains(u) && !touched.contains(u)) {
        return Err(breach("touched_set_complete", format!("{uri} was added but the session table does not report it touched")));
    }
    Ok(())
}

/// Rule 2 at the end: requests still owed a reply on live connections.
pub fn unanswered(clients: &[Client]) -> Vec<String> {
    clients
        .iter()
        .filter(|c| c.conn.is_some())
        .flat_map(|c| c.outstanding.iter().map(move |(id, r)| format!("client {} request {id} ({}) unanswered", c.index, r.method)))
        .collect()
}

/// What the world knew just before a crash.
#[derive(Debug, Clone, Default)]
pub struct PreCrash {
    /// Each in-memory session's acknowledged bits (read, archived), by store key.
    pub bits: BTreeMap<String, (bool, bool)>,
    /// Unanswered writes per key.
    pub unacked: BTreeMap<String, Vec<Option<SessionRecord>>>,
}

/// Rule 5: after a restart every durable record is listed again, with the
/// durable title and bits, and the read/archived bits are the ones the host
/// had acknowledged (or those of a write that was in flight at the crash).
pub fn check_restart(pre: &PreCrash, store: &Store, view: &HostView<'_>) -> Result<(), Violation> {
    for (key, record) in &store.durable {
        if record.deleted {
            // A disposed session stays disposed across restarts, whatever
            // its backend's transcripts still hold.
            if view.sessions.contains_key(&record.resource) {
                return Err(breach("rule5_restart_keeps_acked", format!("disposed session {key} (its tombstone is durable) is listed after the restart")));
            }
            continue;
        }
        let Some(s) = view.sessions.get(&record.resource) else {
            return Err(breach("rule5_restart_keeps_acked", format!("durable record {key} is not listed after the restart")));
        };
        if !s.is_announced() {
            return Err(breach("rule5_restart_keeps_acked", format!("{key} restored but not listed")));
        }
        if s.record().title != record.title || s.record().is_read != record.is_read || s.record().is_archived != record.is_archived {
            return Err(breach("rule5_restart_keeps_acked", format!("{key} restored with other bits than the store holds")));
        }
        check_restart_chat_flags(key, record, s.record())?;
        if let Some((read, archived)) = pre.bits.get(key) {
            let unacked = pre.unacked.get(key).map(Vec::as_slice).unwrap_or(&[]);
            let read_ok = record.is_read == *read || unacked.iter().flatten().any(|r| r.is_read == record.is_read);
            let archived_ok = record.is_archived == *archived || unacked.iter().flatten().any(|r| r.is_archived == record.is_archived);
            if !read_ok || !archived_ok {
                return Err(breach("rule5_restart_keeps_acked", format!(
                    "{key} came back read={} archived={} but the host had acknowledged read={read} archived={archived} and no write in flight says so",
                    record.is_read, record.is_archived
                )));
            }
        }
    }
    for (key, acked) in &store.acked {
        if let crate::store::Acked::Put(_) = acked {
            let deleted_in_flight = pre.unacked.get(key).is_some_and(|w| w.iter().any(Option::is_none));
            if !store.durable.contains_key(key) && !deleted_in_flight {
                return Err(breach("rule5_restart_keeps_acked", format!("acknowledged record {key} is not durable")));
            }
        }
    }
    Ok(())
}

/// Rule 5 for a chat's own read and archived bits (issue 23, part B): a
/// restart reads back each chat's bits as the store holds them.
fn check_restart_chat_flags(key: &str, durable: &SessionRecord, restored: &SessionRecord) -> Result<(), Violation> {
    use ahpd_core::session::state::{IS_ARCHIVED, IS_READ};
    for chat in &durable.chats {
        let Some(back) = restored.chats.iter().find(|c| c.resource == chat.resource) else { continue };
        if back.status & (IS_READ | IS_ARCHIVED) != chat.status & (IS_READ | IS_ARCHIVED) {
            return Err(breach("rule5_restart_keeps_acked", format!(
                "{key}: chat {} came back with flags {} where the store holds {}",
                chat.resource, back.status & (IS_READ | IS_ARCHIVED), chat.status & (IS_READ | IS_ARCHIVED)
            )));
        }
    }
    Ok(())
}

/// Liveness: what has not settled yet (empty when everything settled).
pub fn pending(view: &HostView<'_>, clients: &[Client], q: &Queue) -> Vec<String> {
    let mut out = unanswered(clients);
    for c in clients {
        if c.walk.is_some() && c.conn.is_some() {
            out.push(format!("client {} page walk in progress", c.index));
        }
        if c.conn.is_some() && !c.ready {
            out.push(format!("client {} handshake in progress", c.index));
        }
    }
    for (uri, s) in view.sessions {
        if !matches!(s.phase(), Phase::Live { .. } | Phase::Asleep) {
            out.push(format!("{uri} left {}", s.phase().name()));
        }
        if !s.work().waiters.is_empty() {
            out.push(format!("{uri} has {} waiters", s.work().waiters.len()));
        }
        if s.work().parked.is_some() || !s.work().inbox.is_empty() {
            out.push(format!("{uri} has actions waiting for the store"));
        }
        if !s.work().sends_in_flight.is_empty() || !s.work().pending_sends.is_empty() {
            out.push(format!("{uri} has turns not handed to its agent"));
        }
    }
    out.extend(q.describe(10));
    out
}
