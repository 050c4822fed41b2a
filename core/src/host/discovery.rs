//! The catalogue's second half: passes over the backends' own transcripts
//! (Sessions page, "Finding one"), external sessions, and the root config's
//! `showExternalSessions`.
//!
//! An owner of the host's (issue 47: "the host routes, owners decide"):
//! [`Discovery`] holds the passes in flight, when the last began and the
//! merges waiting; [`Finder`] is it at work for one input, with what it may
//! reach (the session table, asked which session holds a conversation; the
//! tombstones, which a dispose makes and a pass judges; [`Shared`]), made by
//! `Host::finder`. What a pass changes beyond that (a session listed or
//! forgotten, a row told, a record written) it returns as [`Found`], which
//! `Host::apply_found` applies in order. A merge runs a step at a time
//! ([`Finder::merge_on`]) and the host applies each step's outs before the
//! next, so every row is judged against the host as the rows before it
//! left it.

use std::collections::{BTreeSet, VecDeque};

use ahp_types::actions::RootConfigChangedAction;
use ahp_types::state::{ConfigSchema, RootConfigState};
use ahp_types::Uri;

use super::{Op, Shared, Tombstones};
use crate::effect::{Effect, LogEvent, LogLevel, OpId};
use crate::external::{ExternalFilter, ExternalMode};
use crate::ids::{self, ResourceId};
use crate::input::{Outcome, ScannedRow};
use crate::record::{ChatRecord, SessionRecord, RECORD_FORMAT};
use crate::session::table::{conversation_key, SessionTable};
use crate::session::{Phase, Session};
use crate::shared::SHOW_EXTERNAL;
use crate::time::{MonoTime, WallTime};

/// The root config state: one property, `showExternalSessions`.
pub fn root_config(mode: ExternalMode) -> RootConfigState {
    let mut property = crate::session_config::plain_property("string", "Show external sessions");
    property.description = Some("Which sessions that agents' own CLIs wrote outside this host the catalogue lists.".to_owned());
    property.default = Some(serde_json::Value::from("none"));
    property.r#enum = Some(ExternalMode::ALL.iter().map(|m| serde_json::Value::from(m.name())).collect());
    property.enum_labels = Some(vec![
        "None".to_owned(),
        "Recent".to_owned(),
        "Last 24 hours".to_owned(),
        "Last 7 days".to_owned(),
        "Last 30 days".to_owned(),
    ]);
    RootConfigState {
        schema: ConfigSchema {
            r#type: "object".to_owned(),
            properties: [(SHOW_EXTERNAL.to_owned(), property)].into_iter().collect(),
            required: None,
        },
        values: [(SHOW_EXTERNAL.to_owned(), serde_json::Value::from(mode.name()))].into_iter().collect(),
    }
}

/// Whether a client may change the root config so: only
/// `showExternalSessions`, only to one of its modes (a replacing config
/// must name it). `Err` is the reason the action is rejected with.
pub(crate) fn check_root_config(action: &RootConfigChangedAction) -> Result<(), String> {
    for (key, value) in &action.config {
        if key != SHOW_EXTERNAL {
            return Err(format!("unknown root config key {}", ids::printable(key)));
        }
        if value.as_str().and_then(ExternalMode::parse).is_none() {
            return Err(format!("{SHOW_EXTERNAL} must be one of none, recent, last24Hours, last7Days, last30Days"));
        }
    }
    if action.replace == Some(true) && !action.config.contains_key(SHOW_EXTERNAL) {
        return Err(format!("a replacing root config must name {SHOW_EXTERNAL}"));
    }
    Ok(())
}

/// Discovery's own state: the passes over the backends' transcripts in
/// flight, when the last round of them began, and the passes being merged.
#[derive(Debug, Clone, Default)]
pub(crate) struct Discovery {
    /// Providers whose scan is in flight (until its merge ends).
    scans_in_flight: BTreeSet<String>,
    /// When the last scans were started; `None` before the first.
    last_scan_at: Option<MonoTime>,
    /// Passes being merged, a slice an input.
    merges: Merges,
}

impl Discovery {
    /// When the next slice of a merge is due ([`Merges::deadline`]), if a
    /// merge waits: the timer table's `ScanMerge` kind.
    pub(crate) fn deadline(&self, now: MonoTime) -> Option<MonoTime> {
        self.merges.deadline(now)
    }

    /// Whether a pass is being merged (its slices may list sessions again,
    /// asleep, in any input).
    pub(crate) fn merging(&self) -> bool {
        self.merges.pending()
    }
}

/// Discovery at work for one input: its state with what it may reach.
/// Made by `Host::finder`; what it changes beyond these it returns as
/// [`Found`].
pub(crate) struct Finder<'a> {
    /// Discovery's own state.
    pub(crate) state: &'a mut Discovery,
    /// The session table: read, and asked which session holds a
    /// conversation (which brings that index up to date first).
    pub(crate) sessions: &'a mut SessionTable,
    /// The disposed sessions' tombstones: read to hide rows, and spent by
    /// the passes that speak for them.
    pub(crate) tombstones: &'a mut Tombstones,
    /// What every part shares (time, settings, ops, effects, the catalogue).
    pub(crate) shared: &'a mut Shared,
}

/// What a pass (or a change of `showExternalSessions`) asks of the host
/// beyond discovery's own state: applied by `Host::apply_found` in the
/// order given, before discovery is asked for its next step.
#[derive(Debug)]
pub(crate) enum Found {
    /// A session a pass found, asleep and not held: added to the table,
    /// its chats indexed, announced (`Host::announce`).
    Listed {
        /// Its URI.
        uri: Uri,
        /// The session, made from the row.
        session: Box<Session>,
    },
    /// The session's record is written (`Session::store_put`).
    Store(Uri),
    /// An external session at rest whose transcript a pass found again:
    /// the row's title (when it has one) and its `modifiedAt` (moved only
    /// forward) taken, root subscribers told of the row.
    Refreshed {
        /// The session.
        uri: Uri,
        /// The row's title, when not empty.
        title: Option<Box<str>>,
        /// The row's `modifiedAt`.
        modified_at: WallTime,
    },
    /// One more chat of a session this host ran, asleep, found after the
    /// session was listed again: it joins the session, is indexed, moves
    /// its `modifiedAt` forward, and the record is written and the row told.
    ChatJoined {
        /// The session.
        uri: Uri,
        /// The chat's record, made from the row.
        chat: Box<ChatRecord>,
        /// The row's `modifiedAt`.
        modified_at: WallTime,
    },
    /// An external session whose transcript went: removed from the table,
    /// the catalogue and the chat index, and root subscribers that were
    /// shown it told `root/sessionRemoved`.
    Gone(Uri),
    /// A chat whose transcript a pass could not read (issue 25): marked
    /// damaged (`session/damage.rs`); when that is news, logged and the
    /// session's row told.
    Damaged {
        /// The session holding the chat.
        uri: Uri,
        /// The chat.
        chat: Uri,
        /// The provider whose pass could not read it.
        provider: String,
    },
    /// An external session the mode now shows: its row is sent to root
    /// subscribers as `root/sessionAdded`.
    Shown(Uri),
    /// An external session the mode no longer shows: root subscribers are
    /// told `root/sessionRemoved`.
    Hidden(Uri),
    /// A log line, queued after what the outs before it did.
    Log(LogEvent),
}

/// A slice of the merges under way in one input ([`Finder::begin_slice`]):
/// the budget left and the merge at hand between two steps.
#[derive(Debug)]
pub(crate) struct Slice {
    /// What is left of the slice's budget (rows cost [`ROW_COST`], a
    /// session walked 1).
    budget: usize,
    /// The merge a step stopped in to have its outs applied.
    at: Option<Merge>,
}

/// How far a merge came in one step ([`Finder::merge_slice`]).
enum Progress {
    /// A row or a walk found what the host applies before the merge goes
    /// on.
    Found(Vec<Found>),
    /// The merge is done.
    Done,
    /// The slice's budget is spent, the merge not done.
    Spent,
}

impl Finder<'_> {
    /// At the first input: the first pass over every backend's transcripts
    /// runs behind whatever it is.
    pub(crate) fn scan_at_first_input(&mut self) {
        if self.state.last_scan_at.is_none() {
            self.start_scans();
        }
    }

    /// Fixes the `recent` cutoff the first time a listing runs: the second
    /// most recent update of a session of this host's own.
    pub(crate) fn note_first_listing(&mut self) {
        if self.shared.recent_cutoff.is_some() {
            return;
        }
        let mut own: Vec<WallTime> = self.sessions.values().filter(|s| s.is_announced() && !s.record().external).map(|s| s.modified_at()).collect();
        own.sort_by(|a, b| b.cmp(a));
        self.shared.recent_cutoff = Some(own.get(1).copied());
    }

    /// Starts a scan of every agent and external source that has none in
    /// flight.
    fn start_scans(&mut self) {
        let mut providers: BTreeSet<String> = self.shared.config.agents.iter().map(|a| a.provider.clone()).collect();
        providers.extend(self.shared.config.external_sources.iter().cloned());
        self.state.last_scan_at = Some(self.shared.now.mono);
        for provider in providers {
            if self.state.scans_in_flight.insert(provider.clone()) {
                let op = self.shared.new_op(Op::Scan { provider: provider.clone() });
                self.shared.effects.push(Effect::Scan { op, provider });
            }
        }
    }

    /// After a listing: a refresh runs behind the answer when the last pass
    /// is older than `scan_interval_ms`.
    pub(crate) fn refresh_if_stale(&mut self) {
        let stale = self.state.last_scan_at.is_none_or(|t| self.shared.now.mono >= t.plus_ms(self.shared.config.scan_interval_ms));
        if stale {
            self.start_scans();
        }
    }

    /// A pass over `provider`'s transcripts finished: its rows are merged
    /// into the catalogue (see [`Merge`]), a slice now and the rest in the
    /// inputs after this one. The provider counts as being scanned until
    /// its merge ends, so no second pass of it starts meanwhile. Returns
    /// the chats whose transcripts the pass could not read.
    pub(crate) fn on_scanned(&mut self, provider: &str, op: OpId, outcome: Outcome) -> Vec<Found> {
        let (rows, damaged) = match outcome {
            Outcome::Scanned { rows, damaged } => {
                let damaged = self.damaged_transcripts(provider, &damaged);
                (rows, damaged)
            }
            Outcome::Failed { message } => {
                self.state.scans_in_flight.remove(provider);
                crate::mark!("scan_failed");
                self.shared.log(LogLevel::Warn, "catalogue.scan_failed", None, format!("{provider}: {message}"));
                return Vec::new();
            }
            _ => {
                self.state.scans_in_flight.remove(provider);
                return Vec::new();
            }
        };
        self.state.merges.queue.push_back(Merge {
            provider: provider.to_owned(),
            op,
            rows_total: rows.len(),
            stage: Stage::Defaults,
            rows: rows.into_iter(),
            set_aside: Vec::new(),
            guarding: BTreeSet::new(),
            seen: BTreeSet::new(),
            skipped: 0,
            slices: 0,
        });
        damaged
    }

    /// Transcripts a pass found but could not read (issue 25): the chat
    /// that holds each is marked damaged (`session/damage.rs`) when its
    /// session's state is not held; a held state came from the agent, which
    /// read the conversation at its start and holds it still. One that no
    /// session holds is only the shell's log line.
    fn damaged_transcripts(&mut self, provider: &str, ids: &[String]) -> Vec<Found> {
        let mut found = Vec::new();
        for id in ids {
            let Some((uri, session)) = self.sessions.conversation_holder(provider, id) else { continue };
            if session.resident().is_some() {
                continue;
            }
            let Some(chat) = session.record().chats.iter().find(|c| &*c.conversation_id == id).map(|c| c.resource.clone()) else { continue };
            found.push(Found::Damaged { uri: uri.clone(), chat, provider: provider.to_owned() });
        }
        found
    }

    /// Starts a slice of the passes waiting, when one is due
    /// ([`Merges::due`]): at once for a pass that just came, so a pass no
    /// bigger than a slice is merged in the input that brought it; then on
    /// the first tick a millisecond after the last slice, or on any input
    /// once the merge has waited [`MERGE_SLICE_OVERDUE_MS`]. A tick comes
    /// when the driver has nothing else to read, so the frames that came
    /// during a slice are answered before the next slice (issue 21: a
    /// slice on every input let pings queue up behind slice after slice).
    /// `None`: no slice is due. The slice is run by [`Finder::merge_on`].
    pub(crate) fn begin_slice(&mut self, tick: bool) -> Option<Slice> {
        let now = self.shared.now.mono;
        if !self.state.merges.due(now, tick) {
            return None;
        }
        self.state.merges.last_slice = Some(now);
        let budget = self.shared.config.scan_merge_slice.max(1).saturating_mul(ROW_COST);
        Some(Slice { budget, at: None })
    }

    /// Merges `slice` on (`scan_merge_slice` rows, or eight times as many
    /// sessions walked, over the passes in the order they came) until a
    /// row or a walk finds something the host must do: those outs, which
    /// the host applies before calling again. `None`: the slice is over.
    pub(crate) fn merge_on(&mut self, slice: &mut Slice) -> Option<Vec<Found>> {
        loop {
            let mut merge = match slice.at.take() {
                Some(merge) => merge,
                None => {
                    if slice.budget == 0 {
                        break;
                    }
                    let Some(mut merge) = self.state.merges.queue.pop_front() else { break };
                    merge.slices += 1;
                    if merge.slices == 2 {
                        crate::mark!("scan_merge_sliced");
                    }
                    merge
                }
            };
            match self.merge_slice(&mut merge, &mut slice.budget) {
                Progress::Found(found) => {
                    slice.at = Some(merge);
                    return Some(found);
                }
                Progress::Done => self.finish_merge(merge),
                Progress::Spent => {
                    if merge.slices == 1 {
                        // Said only of a pass bigger than a slice: a small one is
                        // merged in the input that brought it, as it always was.
                        self.shared.log(LogLevel::Info, "catalogue.scan_merging", None, format!(
                            "{}: {} rows, merged {} a slice",
                            merge.provider, merge.rows_total, self.shared.config.scan_merge_slice.max(1)
                        ));
                    }
                    self.state.merges.queue.push_front(merge);
                }
            }
        }
        if self.state.merges.queue.is_empty() {
            self.state.merges.last_slice = None;
        }
        None
    }

    /// Merges `merge` on until `budget` is spent, it is done, or a row or
    /// a walk found something for the host. Every row is judged against
    /// the host as it is when its turn comes, so what other inputs changed
    /// between two slices counts: a session disposed meanwhile has a
    /// tombstone that hides its rows, one adopted is no longer external,
    /// one made meanwhile holds its conversations.
    fn merge_slice(&mut self, merge: &mut Merge, budget: &mut usize) -> Progress {
        if matches!(merge.stage, Stage::Swept) {
            return Progress::Done;
        }
        while *budget > 0 {
            match &mut merge.stage {
                Stage::Defaults => match merge.rows.next() {
                    Some(row) => {
                        *budget = budget.saturating_sub(ROW_COST);
                        if is_default_chat(&row) {
                            let found = self.merge_row(merge, row);
                            if !found.is_empty() {
                                return Progress::Found(found);
                            }
                        } else {
                            merge.set_aside.push(row);
                        }
                    }
                    None => {
                        merge.rows = std::mem::take(&mut merge.set_aside).into_iter();
                        merge.stage = Stage::Others;
                    }
                },
                Stage::Others => match merge.rows.next() {
                    Some(row) => {
                        *budget = budget.saturating_sub(ROW_COST);
                        let found = self.merge_row(merge, row);
                        if !found.is_empty() {
                            return Progress::Found(found);
                        }
                    }
                    None => merge.stage = Stage::Sweep { after: None },
                },
                Stage::Sweep { after } => {
                    // External sessions whose transcript went, untouched by
                    // this pass, go too: walked in URI order from where the
                    // last slice stopped, `budget` sessions, the gone ones
                    // forgotten after the walk.
                    let provider = merge.provider.as_str();
                    let mut walked = 0;
                    let mut last = None;
                    let mut gone = Vec::new();
                    for (uri, s) in self.sessions.iter_after(after.as_deref()).take(*budget) {
                        walked += 1;
                        last = Some(uri);
                        if s.record().provider == provider
                            && s.record().external
                            && s.resident().is_none()
                            && s.is_asleep()
                            && s.record().chats.iter().all(|c| !merge.seen.contains(&conversation_key(provider, &c.conversation_id)))
                        {
                            gone.push(Found::Gone(uri.clone()));
                        }
                    }
                    let done = walked < *budget;
                    *budget -= walked;
                    if let Some(uri) = last {
                        *after = Some(uri.clone());
                    }
                    if done {
                        merge.stage = Stage::Swept;
                    }
                    if !gone.is_empty() {
                        return Progress::Found(gone);
                    }
                    if done {
                        return Progress::Done;
                    }
                }
                Stage::Swept => return Progress::Done,
            }
        }
        Progress::Spent
    }

    /// One row of a pass: hidden by a tombstone, or an external session's
    /// title and times refreshed, or a conversation this host ran listed
    /// again, or one a CLI wrote listed as external.
    fn merge_row(&mut self, merge: &mut Merge, row: ScannedRow) -> Vec<Found> {
        let provider = merge.provider.as_str();
        if ids::validate_conversation_id(&row.conversation_id).is_err() {
            merge.skipped += 1;
            return Vec::new();
        }
        // A row of a disposed session is not listed again, and a tombstone
        // none of whose rows this pass found has nothing left to guard.
        let tombstone = self.tombstones.hiding(provider, &row.conversation_id).cloned().or_else(|| {
            if self.tombstones.is_empty() {
                return None;
            }
            let session = ResourceId::parse(row.session.as_deref()?).ok()?.uri();
            self.tombstones.contains_key(&session).then_some(session)
        });
        if let Some(uri) = tombstone {
            crate::mark!("tombstone_hides_row");
            merge.guarding.insert(uri);
            return Vec::new();
        }
        merge.seen.insert(conversation_key(provider, &row.conversation_id));
        if let Some((uri, s)) = self.sessions.conversation_holder(provider, &row.conversation_id) {
            // Only an external session at rest takes the row's title and
            // times; asked here first so that a session of this host's own
            // is read, not handed out to change.
            if s.record().external && s.resident().is_none() {
                let title = (!row.title.is_empty()).then(|| row.title.as_str().into());
                return vec![Found::Refreshed { uri: uri.clone(), title, modified_at: row.modified_at }];
            }
            return Vec::new();
        }
        match row.session.clone() {
            Some(session) => self.rediscover(provider, &session, row),
            None => self.discover_external(provider, row),
        }
    }

    /// The end of a pass's merge: what it skipped and what the tombstones
    /// guard is logged, the tombstones it speaks for are judged, and the
    /// provider may be scanned again.
    fn finish_merge(&mut self, merge: Merge) {
        let provider = merge.provider.as_str();
        self.state.scans_in_flight.remove(provider);
        if merge.skipped > 0 {
            crate::mark!("scan_rows_skipped");
            self.shared.log(LogLevel::Warn, "catalogue.rows_skipped", None, format!("{provider}: {} rows with ids that are not safe to use", merge.skipped));
        }
        if !merge.guarding.is_empty() {
            self.shared.log(LogLevel::Info, "catalogue.tombstones_held", None, format!(
                "{provider}: {} disposed sessions' transcripts are still there and stay unlisted",
                merge.guarding.len()
            ));
        }
        if merge.slices > 1 {
            self.shared.log(LogLevel::Info, "catalogue.scan_merged", None, format!("{provider}: {} conversations in {} slices", merge.seen.len(), merge.slices));
        }
        self.spend_tombstones(provider, merge.op, &merge.guarding);
    }

    /// After pass `op` over `provider` found rows the tombstones in
    /// `guarding` hide: a tombstone goes (from the store too) once every
    /// source's latest pass asked after it was made found no row it hides
    /// ([`super::Tombstone`]). Its URI may have been made again under
    /// another agent and disposed again: the copy the first agent kept must
    /// stay hidden (issue 19, sim seeds 2347 and 11188).
    fn spend_tombstones(&mut self, provider: &str, op: OpId, guarding: &BTreeSet<Uri>) {
        for (uri, _, clean) in self.tombstones.passes_mut().filter(|(_, since, _)| op > *since) {
            if guarding.contains(uri) {
                clean.remove(provider);
            } else {
                clean.insert(provider.to_owned());
            }
        }
        let sources: Vec<&String> = self.shared.config.agents.iter().map(|a| &a.provider).chain(self.shared.config.external_sources.iter()).collect();
        let spent: Vec<Uri> = self
            .tombstones
            .iter()
            .filter(|(_, t)| sources.iter().all(|p| t.clean.contains(*p)))
            .map(|(u, _)| u.clone())
            .collect();
        for uri in spent {
            let Some(t) = self.tombstones.remove(&uri) else { continue };
            crate::mark!("tombstone_spent");
            let op = self.shared.new_op(Op::StoreForget { session: uri.clone() });
            self.shared.effects.push(Effect::Store { op, command: crate::effect::StoreCmd::Delete { key: t.record.key().into_owned() } });
        }
    }

    /// A session made from a pass's row: asleep, not held, made now.
    fn listed(&self, record: SessionRecord, uri: Uri) -> Found {
        let can_resume = self.shared.agent_can_resume(&record.provider);
        let session = Session::new(record, Phase::Asleep, None, can_resume, self.shared.now.mono);
        Found::Listed { uri, session: Box::new(session) }
    }

    /// A conversation this host ran whose record the store does not hold:
    /// listed again, under the URI the backend wrote down.
    ///
    /// Every chat of it comes back: rows are merged default chats first (see
    /// [`is_default_chat`]), so a later chat joins the session its
    /// default chat made; a session whose default chat's transcript is gone
    /// is listed with that chat under the id the host gives it. A session
    /// or chat disposed in this process stays gone, even when a pass that
    /// began before the dispose still found its transcript.
    fn rediscover(&mut self, provider: &str, session: &Uri, row: ScannedRow) -> Vec<Found> {
        let Ok(id) = ResourceId::parse(session) else { return Vec::new() };
        let uri = id.uri();
        let default_chat = id.default_chat_uri();
        let chat = row.chat.clone().filter(|c| ResourceId::parse(c).is_ok()).unwrap_or_else(|| default_chat.clone());
        if self.shared.retired.contains(&uri) || self.shared.retired.contains(&chat) || self.shared.chats.contains_key(&chat) {
            return Vec::new();
        }
        if self.sessions.contains_key(&uri) {
            return self.rediscover_chat(&uri, chat, &row);
        }
        let mut record = record_from_row(provider, &id, default_chat.clone(), &row, false);
        if chat != default_chat {
            record.title = Box::default();
            record.chats[0].conversation_id = id.store_key().into();
            record.chats.push(chat_from_row(chat, &row));
        }
        crate::mark!("rediscovered_from_transcripts");
        let log = LogEvent { level: LogLevel::Info, event: "session.rediscovered", session: Some(uri.clone()), detail: format!("from {provider}'s transcripts") };
        vec![self.listed(record, uri.clone()), Found::Store(uri), Found::Log(log)]
    }

    /// One more chat of a session this host ran, found in its backend's
    /// transcripts after the session itself was listed again: it joins the
    /// session (asleep, as every rediscovered session is).
    fn rediscover_chat(&mut self, uri: &Uri, chat: Uri, row: &ScannedRow) -> Vec<Found> {
        // Asked as a session to change, whether or not it takes the chat:
        // the sessions an input touched are the ones the step rules check
        // again.
        let Some(session) = self.sessions.get_mut(uri) else { return Vec::new() };
        if session.record().external || session.resident().is_some() || !session.is_asleep() {
            return Vec::new();
        }
        vec![Found::ChatJoined { uri: uri.clone(), chat: Box::new(chat_from_row(chat, row)), modified_at: row.modified_at }]
    }

    /// A conversation a CLI wrote outside this host: listed as external
    /// under `<provider>:/<id>`.
    fn discover_external(&mut self, provider: &str, row: ScannedRow) -> Vec<Found> {
        let Ok(id) = ResourceId::parse(&format!("{provider}:/{}", row.conversation_id)) else { return Vec::new() };
        let chat = format!("ahp-chat:/{}", id.store_key());
        if self.sessions.contains_key(&id.uri()) || self.shared.chats.contains_key(&chat) {
            return Vec::new();
        }
        let record = record_from_row(provider, &id, chat, &row, true);
        vec![self.listed(record, id.uri())]
    }

    /// After the mode changed from `before`: sessionAdded / sessionRemoved
    /// for every external session whose visibility moved, then a log line
    /// of how many.
    pub(crate) fn reconcile_external(&mut self, before: ExternalFilter) -> Vec<Found> {
        let after = self.shared.external_filter();
        let mut found = Vec::new();
        let mut added = 0;
        let mut removed = 0;
        for (uri, s) in self.sessions.iter().filter(|(_, s)| s.record().external && s.is_announced()) {
            let modified = s.modified_at();
            match (before.shows(modified, uri), after.shows(modified, uri)) {
                (false, true) => {
                    added += 1;
                    found.push(Found::Shown(uri.clone()));
                }
                (true, false) => {
                    removed += 1;
                    found.push(Found::Hidden(uri.clone()));
                }
                _ => {}
            }
        }
        crate::mark!("external_mode_changed");
        found.push(Found::Log(LogEvent {
            level: LogLevel::Info,
            event: "catalogue.external_mode",
            session: None,
            detail: format!("{} now: {added} external sessions shown, {removed} no longer shown", self.shared.external_mode().name()),
        }));
        found
    }
}

/// A session's record as a scan row describes it: one chat, `chat`,
/// listed under `id`, by `provider`; `external` for a conversation a CLI
/// wrote outside this host.
fn record_from_row(provider: &str, id: &ResourceId, chat: Uri, row: &ScannedRow, external: bool) -> SessionRecord {
    let created = row.created_at.min(row.modified_at);
    SessionRecord {
        format: RECORD_FORMAT,
        key: crate::record::Derived::default(),
        resource: id.uri(),
        provider: provider.into(),
        title: row.title.as_str().into(),
        created_at: crate::record::Stamp::at(created),
        modified_at: crate::record::Stamp::at(row.modified_at),
        is_read: false,
        is_archived: false,
        working_directories: row.working_directory.iter().cloned().collect(),
        config: Default::default(),
        owner: None,
        scope: None,
        default_chat: crate::record::Derived::held(chat.clone()),
        chats: vec![chat_from_row(chat, row)],
        changes: None,
        external,
        offer: None,
        in_tree: None,
        shared_trees: Default::default(),
        deleted: false,
        tools: None,
        git: None,
    }
}

/// A chat's record as a scan row describes it.
fn chat_from_row(chat: Uri, row: &ScannedRow) -> ChatRecord {
    ChatRecord {
        resource: chat,
        title: Box::default(),
        conversation_id: row.conversation_id.as_str().into(),
        modified_at: crate::record::Stamp::at(row.modified_at),
        status: crate::session::state::IDLE,
        fresh: false,
        damaged: false,
        senders: Default::default(),
    changes: None,
    written: Default::default(),
    kept: Default::default(),
    draft: None,
    forgetting: Default::default(),
    origin: None,
    seed: Default::default(),
    queued: Default::default(),
    steering: None,
    moved: None,
    }
}

/// Whether a row names no chat or its session's default chat: such rows
/// are merged first, the rest after them, each group in the order given,
/// so a session's default chat is listed before its other chats join it.
fn is_default_chat(row: &ScannedRow) -> bool {
    match (&row.session, &row.chat) {
        (_, None) | (None, _) => true,
        (Some(s), Some(c)) => ResourceId::parse(s).is_ok_and(|id| id.default_chat_uri() == *c),
    }
}

/// Passes over the backends' transcripts waiting to be merged, in the order
/// they came, and when the last slice ran (issue 21).
#[derive(Debug, Clone, Default)]
struct Merges {
    queue: VecDeque<Merge>,
    /// When the last slice was merged; `None` when none was since the
    /// queue was last empty, so the next is due at once.
    last_slice: Option<MonoTime>,
}

/// The least time between two slices of a merge, in ms: the driver reads
/// the events that came meanwhile (client frames first) before the next.
pub(crate) const MERGE_SLICE_GAP_MS: u64 = 1;

/// How long a merge waits for a tick before an input of any kind runs its
/// next slice, in ms: a stream of frames that never leaves the driver idle
/// slows a merge down but cannot stop it.
pub(crate) const MERGE_SLICE_OVERDUE_MS: u64 = 20;

/// What a row costs of a slice's budget, against 1 for a session walked in
/// the search for external sessions whose transcript went (a look at two
/// fields, against a row's parses, lookups and inserts).
const ROW_COST: usize = 8;

impl Merges {
    /// Whether a slice is due at `now` in an input that is a tick (`tick`)
    /// or not: derived from the last slice's time (docs/STYLE.md 3.3).
    pub(crate) fn due(&self, now: MonoTime, tick: bool) -> bool {
        if self.queue.is_empty() {
            return false;
        }
        let gap = if tick { MERGE_SLICE_GAP_MS } else { MERGE_SLICE_OVERDUE_MS };
        self.last_slice.is_none_or(|t| now >= t.plus_ms(gap))
    }

    /// When the host wants the tick the next slice runs on, if a merge
    /// waits: a millisecond after the last slice, and after `now` (an
    /// input that was not a tick may have found it due and left it).
    pub(crate) fn deadline(&self, now: MonoTime) -> Option<MonoTime> {
        if self.queue.is_empty() {
            return None;
        }
        let after_last = self.last_slice.map_or(MonoTime(0), |t| t.plus_ms(MERGE_SLICE_GAP_MS));
        Some(after_last.max(now.plus_ms(1)))
    }

    /// Whether a merge waits.
    pub(crate) fn pending(&self) -> bool {
        !self.queue.is_empty()
    }
}

/// One pass over a provider's transcripts being merged into the catalogue
/// (Sessions page, "Finding one"), a slice an input: a conversation of this
/// host's own whose record was lost (a `--sessions memory` restart) comes
/// back unread and unarchived; one a CLI wrote outside this host is listed
/// as external; an external one whose transcript is gone goes; a row a
/// tombstone hides stays unlisted, and the tombstones the pass speaks for
/// are judged at its end (`Finder::spend_tombstones`).
#[derive(Debug, Clone)]
struct Merge {
    /// The backend or external source scanned.
    provider: String,
    /// The pass's op: which tombstones it speaks for.
    op: OpId,
    /// How many rows it found.
    rows_total: usize,
    /// How far the merge has come.
    stage: Stage,
    /// The rows still to read in this stage.
    rows: std::vec::IntoIter<ScannedRow>,
    /// Rows of chats that are not their session's default, kept for the
    /// second stage.
    set_aside: Vec<ScannedRow>,
    /// Tombstones this pass found rows of.
    guarding: BTreeSet<Uri>,
    /// The conversations of the rows merged (no tombstone hid them), by
    /// their index key: numbers, so a 100k-row pass neither copies every id
    /// nor frees 100k strings in its last slice. Two ids that share a key
    /// (a chance of ~1 in 10^9 at 100k rows) could keep an external session
    /// whose transcript went listed until the next pass.
    seen: BTreeSet<u64>,
    /// Rows whose ids are not safe to use.
    skipped: usize,
    /// Slices merged so far.
    slices: u32,
}

/// The stages of a [`Merge`], in order.
#[derive(Debug, Clone)]
enum Stage {
    /// Rows of default chats (or none) merged, the others set aside.
    Defaults,
    /// The rows set aside merged.
    Others,
    /// The walk over the sessions for external ones whose transcript went,
    /// after the session named (from the first when `None`).
    Sweep { after: Option<Uri> },
    /// The walk ended: what it found gone is applied, then the merge ends.
    Swept,
}
