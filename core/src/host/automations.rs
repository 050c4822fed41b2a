//! Automations (AHP 1.0's automations channel; issue 24; docs/DECISIONS.md,
//! 25 and 26): the `ahp-automations://` catalogue and each
//! `ahp-automation-run:` channel, the actions clients dispatch on them, the
//! commands (`runAutomation`, `fetchAutomationRuns`,
//! `listAutomationTriggerDefinitions`), schedule fires run by the host's
//! own deadline, and each run's life: a fresh session made from the
//! template (origin `automation`) whose first turn is the definition's
//! message, or the message queued in the pinned session (an ahpd
//! extension, `_meta["ahpd.session"]`), which wakes it (Sessions page,
//! "Sleep and wake": "a run of a pinned automation"). The run ends with
//! the turn: completed, failed with the turn's error, cancelled. A run that
//! cannot start fails with the backend's error and a pinned session stays
//! asleep.
//!
//! Grants (docs/DECISIONS.md, 25): reading the catalogue and its runs is
//! `session:list` / `session:state`; creating is `session:create`;
//! updating, removing and running are `session:create` / `chat:send` by the
//! automation's owner (its creator's principal) or an administrator; a
//! host with no users directory refuses nobody. A run acts as the owner:
//! an owner the directory no longer names, or who lost the grant, makes
//! runs that fail saying so.
//!
//! The owner: [`Automations`] holds the state (one field on the host), and
//! [`Auto`], a view of it with what its rules read of the host, made by
//! `Host::automation`, decides. What it needs of the rest of the host (add
//! a run's session and start its agent, wake a pinned session, deliver a
//! run's message, refuse a client's action) it returns as
//! [`AutomationOut`]s, which `Host::apply_automation` (host.rs) applies in
//! order. The schedule is reached from the timer table (`host/timers.rs`),
//! a session's start, wake, turn end and dispose from `Host::tell`.

use std::collections::{BTreeMap, BTreeSet};

use ahp_types::actions::{
    AutomationRemovedAction, AutomationRunLifecycleChangedAction, AutomationRunPrimarySessionChangedAction, AutomationRunSessionSetAction,
    AutomationSetAction, StateAction, ActionOrigin,
};
use ahp_types::commands::{AutomationCapabilities, AutomationCreateCapability, AutomationScheduleCapabilities, FetchAutomationRunsParams, ListAutomationTriggerDefinitionsParams, RunAutomationParams};
use ahp_types::state::{
    AutomationCancelledRunLifecycle, AutomationCompletedRunLifecycle, AutomationFailedRunLifecycle, AutomationManualRunOrigin, AutomationMisfirePolicy,
    AutomationPendingRunLifecycle, AutomationRunLifecycle, AutomationRunOrigin, AutomationRunningRunLifecycle, AutomationState, AutomationTriggeredRunOrigin,
    ErrorInfo, ResponsePart, SnapshotState, TurnState,
};
use ahp_types::Uri;
use serde_json::{json, Value};

use crate::automation::{self, cron::Schedule, AutomationRecord, RunRecord, RunTurn, AUTOMATIONS_URI, RUN_SCHEME};
use crate::effect::{ConnId, Effect, LogLevel, StoreCmd};
use crate::grants::{Operation, Principal};
use crate::protocol::error::{error, INVALID_PARAMS, PERMISSION_DENIED};
use crate::protocol::params as parse;
use crate::config::Config;
use crate::session::table::SessionTable;
use crate::session::{Phase, Session};
use crate::time::WallTime;

use super::{Op, Shared, Tombstones};

/// The connection a session made for a run is "created by": none is ever
/// connected under it, so what `createSession` would answer goes nowhere.
pub const AUTOMATION_CONN: ConnId = ConnId(u64::MAX);

/// The host's automations and what is in flight for their runs.
#[derive(Debug, Clone, Default)]
pub(crate) struct Automations {
    /// Every automation, by resource.
    pub(crate) by_uri: BTreeMap<Uri, Automation>,
    /// (next occurrence, automation, trigger id) of every enabled schedule
    /// trigger, in time order: the next fire is found without a walk of
    /// every automation (`inv_automation_index_consistent`).
    pub(crate) due: BTreeSet<(WallTime, Uri, String)>,
    /// Each kept run's automation, by run channel.
    pub(crate) runs: BTreeMap<Uri, Uri>,
    /// The sessions made for runs whose agent has not answered its start
    /// yet, with their run.
    pub(crate) starting: BTreeMap<Uri, Uri>,
    /// Pinned sessions being woken for runs, with the runs.
    pub(crate) waking: BTreeMap<Uri, Vec<Uri>>,
    /// The runs waiting for a turn's end, by the turn's session.
    pub(crate) awaiting: BTreeMap<Uri, BTreeSet<Uri>>,
    /// The automations pinned to each session.
    pub(crate) pinned: BTreeMap<Uri, BTreeSet<Uri>>,
}

/// One automation and how much of its history the catalogue shows.
#[derive(Debug, Clone)]
pub(crate) struct Automation {
    /// The record as written.
    pub(crate) record: AutomationRecord,
    /// Ended runs the entry shows (`fetchAutomationRuns` adds a page).
    pub(crate) shown: usize,
}

/// The capabilities `initialize` advertises.
pub fn capabilities() -> AutomationCapabilities {
    AutomationCapabilities {
        create: Some(AutomationCreateCapability {}),
        schedules: Some(AutomationScheduleCapabilities { min_interval_minutes: None }),
        run_cancellation: None,
        run_history_limit: Some(automation::RUN_HISTORY_LIMIT as i64),
        customizations: None,
    }
}

fn failure(message: impl Into<String>) -> ErrorInfo {
    ErrorInfo { error_type: "automationRunFailed".to_owned(), message: message.into(), stack: None, meta: None }
}

fn catalogue() -> Uri {
    AUTOMATIONS_URI.to_owned()
}

/// The next occurrence of each of `record`'s schedule triggers after
/// `after` (none while it is disabled); a trigger whose schedule is
/// unchanged keeps the occurrence it had.
fn next_map(record: &AutomationRecord, old: Option<&AutomationRecord>, after: WallTime) -> BTreeMap<String, WallTime> {
    let mut next = BTreeMap::new();
    if !record.definition.enabled {
        return next;
    }
    for t in automation::schedules(&record.definition) {
        let kept = old.filter(|o| o.definition.enabled).and_then(|o| {
            let same = automation::schedules(&o.definition).any(|p| p.id == t.id && p.schedule == t.schedule);
            same.then(|| o.next.get(&t.id).copied()).flatten()
        });
        let from = record.evaluated.get(&t.id).map_or(after, |e| (*e).max(after));
        let at = kept.or_else(|| Schedule::parse(&t.schedule.expression, &t.schedule.time_zone).ok()?.next_after(from.0).map(WallTime));
        if let Some(at) = at {
            next.insert(t.id.clone(), at);
        }
    }
    next
}

impl Automations {
    /// The state of an automation channel held here: the catalogue, or a
    /// kept run; `None` for any other channel.
    pub(crate) fn state(&self, uri: &str) -> Option<SnapshotState> {
        if uri == AUTOMATIONS_URI {
            let entries = self.by_uri.values().map(|a| a.record.entry(a.shown)).collect();
            return Some(SnapshotState::Automations(Box::new(AutomationState { entries, meta: None })));
        }
        let (auto, run) = self.find_run(uri)?;
        Some(SnapshotState::AutomationRun(Box::new(run.state(auto))))
    }

    /// Run `run`'s automation and record, if it is kept.
    fn find_run(&self, run: &str) -> Option<(&Uri, &RunRecord)> {
        let auto = self.runs.get(run)?;
        let a = self.by_uri.get(auto)?;
        a.record.runs.iter().find(|r| r.resource == run).map(|r| (auto, r))
    }

    /// The wall time the first schedule occurrence is due (the timer table
    /// projects it, `host/timers.rs`); none while the host stops
    /// (`stopping`: the occurrence stays in the record, evaluated after the
    /// restart).
    pub(crate) fn due(&self, stopping: bool) -> Option<WallTime> {
        if stopping {
            return None;
        }
        self.due.first().map(|(at, _, _)| *at)
    }
}

/// Whether `uri` is an automation channel (known or not): the catalogue or
/// an `ahp-automation-run:` channel.
pub(crate) fn is_channel(uri: &str) -> bool {
    uri == AUTOMATIONS_URI || uri.starts_with(&format!("{RUN_SCHEME}:"))
}

/// Whether `definition` may be stored (`automation::check_definition`):
/// its template names a configured agent (`config`'s providers), and a
/// pinned session is one a run may be pinned to ([`pinnable`] in
/// `sessions`). `Err` is the reason the client reads.
pub(crate) fn check(definition: &ahp_types::state::AutomationDefinition, config: &Config, sessions: &SessionTable) -> Result<(), String> {
    let providers: Vec<String> = config.agents.iter().map(|a| a.provider.clone()).collect();
    let session = |uri: &str| pinnable(sessions, uri);
    automation::check_definition(definition, &automation::Known { providers: &providers, session: &session })
}

/// Whether a run may be pinned to session `uri`: one of this host's own,
/// made and announced, not being disposed.
fn pinnable(sessions: &SessionTable, uri: &str) -> bool {
    sessions.get(uri).is_some_and(|s| !matches!(s.phase(), Phase::Disposing(_) | Phase::Starting(_)) && s.is_announced() && !s.record().external)
}

/// Whether an automation owned by `owner` may act with `op` now (a run
/// acts as its owner; docs/DECISIONS.md, 25), by `config`'s users
/// directory (free when there is none). `Err` says why not.
fn owner_holds(config: &Config, owner: Option<&str>, op: Operation) -> Result<(), String> {
    let Some(users) = config.users.as_ref() else { return Ok(()) };
    let owner = owner.unwrap_or("");
    let principal = if let Some(id) = owner.strip_prefix("user:") {
        users.users.iter().find(|u| u.id == id).map(|u| Principal::User { id: u.id.clone(), role: u.role, administrator: u.administrator, memberships: Vec::new() })
    } else if let Some(name) = owner.strip_prefix("plugin:") {
        users.plugins.iter().find(|p| p.name == name).map(|p| Principal::Plugin { name: p.name.clone(), role: p.role })
    } else {
        owner.strip_prefix("root:").map(|host| Principal::Root { host: host.to_owned() })
    };
    match principal {
        Some(p) if p.holds(op) => Ok(()),
        Some(p) => Err(format!("the automation's owner {} does not hold {}", p.owner(), op.name())),
        None => Err(format!("the automation's owner {} is not in the users directory", crate::ids::printable(owner))),
    }
}

/// What the automations need the rest of the host to do, in the order
/// they asked: applied by `Host::apply_automation` (host.rs), one after
/// the other. A decision that goes on after such an action is an out of
/// its own (`Queue`, `Started`, and `AddSession`'s link), so the host's
/// action and the automation's next step keep the order they have.
#[derive(Debug)]
pub(crate) enum AutomationOut {
    /// A client's action on an automation channel is refused: sent back
    /// to `conn` unapplied, with `reason` (`Host::reject`).
    Reject {
        /// The sender.
        conn: ConnId,
        /// The channel it was dispatched on.
        channel: Uri,
        /// The action, as sent.
        action: Box<StateAction>,
        /// The sender's origin, echoed.
        origin: Option<ActionOrigin>,
        /// Why it is refused.
        reason: String,
    },
    /// A fresh session made for run `run` (provisional, as a client's
    /// `createSession` makes one): the host adds it (a tombstone of its URI
    /// goes), indexes its default chat `chat` and starts its default
    /// agent; then the run is linked to it ([`Auto::session_added`]).
    AddSession {
        /// The session's URI.
        uri: Uri,
        /// The session, not yet in the table.
        session: Box<Session>,
        /// Its default chat.
        chat: Uri,
        /// The run it is made for.
        run: Uri,
    },
    /// Wake pinned session `session` for a run: the wake's end
    /// (`Fact::WakeEnded`) queues the run's message or fails the run.
    Wake {
        /// The session to wake.
        session: Uri,
    },
    /// Queue a run's `message` on `chat` of `session` as `turn_id`, sent
    /// by `sender` (the automation's owner): the host's delivery, started
    /// when due, waking the session if it sleeps.
    Deliver {
        /// The session.
        session: Uri,
        /// Its default chat.
        chat: Uri,
        /// The queued message's id, the run's turn.
        turn_id: String,
        /// The definition's message, tagged with its run.
        message: Box<ahp_types::state::Message>,
        /// Who sends it: the automation's owner.
        sender: String,
    },
    /// Queue run `run`'s message in `session` now ([`Auto::queue_run`]),
    /// after what the outs before it did (a wake's end lets several
    /// pinned runs go, each delivered before the next is queued).
    Queue {
        /// The run.
        run: Uri,
        /// The session, live.
        session: Uri,
    },
    /// Run `run` of `automation` started and what it asked of the host is
    /// done: the automation's entry is written and published, and
    /// `answer` (a `runAutomation`'s connection and request id) is told
    /// the run's resource ([`Auto::run_started`]).
    Started {
        /// The automation.
        automation: Uri,
        /// The run made.
        run: Uri,
        /// The `runAutomation` request to answer, if one made the run.
        answer: Option<(ConnId, u64)>,
    },
}

/// The automations at work for one input: their state with what their
/// rules read of the host (the session table and tombstones to name and
/// pin sessions, the window's trees for the trust check, [`Shared`] for
/// the time, the settings, fan-out, the store and the random stream).
/// Made by [`Host::automation`](super::Host::automation); what it needs
/// beyond that comes back as [`AutomationOut`]s, collected in `outs` and
/// returned by each entry point.
pub(crate) struct Auto<'a> {
    /// The automations and their indexes.
    pub(crate) state: &'a mut Automations,
    /// The session table, read.
    pub(crate) sessions: &'a SessionTable,
    /// The tombstones, read (a run's session URI is fresh).
    pub(crate) tombstones: &'a Tombstones,
    /// The window's own trees, read (trusted as their repository is).
    pub(crate) detached: &'a crate::detached::Registry,
    /// What every part shares.
    pub(crate) shared: &'a mut Shared,
    /// Whether a graceful stop is under way (no schedule fires).
    pub(crate) stopping: bool,
    /// What the host is to do, in order.
    pub(crate) outs: Vec<AutomationOut>,
}

impl Auto<'_> {
    // ---- The catalogue and the stored records ----

    /// Restores the automations the store holds (`Host::restore_automations`,
    /// before the first `handle`). A run a stopped process left pending or
    /// running failed with it: its turn was ended in an error by the
    /// restart (`crate::kept_turns`). An automation pinned to a session the
    /// store no longer has is deleted.
    pub(crate) fn restore(&mut self, records: impl IntoIterator<Item = AutomationRecord>) {
        for mut record in records {
            let Some(_) = record.key() else {
                self.shared.log(LogLevel::Warn, "store.automation_skipped", None, format!("stored automation {} is not an ahp-automation URI; left on disk", crate::ids::printable(&record.resource)));
                continue;
            };
            if self.state.by_uri.contains_key(&record.resource) {
                continue;
            }
            // Pinned to a session the store no longer has (its dispose
            // ended but this record's removal was lost): it goes now.
            if let Some(pin) = record.pinned().filter(|p| !self.sessions.contains_key(p)) {
                self.shared.log(LogLevel::Info, "automation.removed", None, format!("{}: its pinned session {pin} is gone", record.resource));
                if let Some(key) = record.key() {
                    let op = self.shared.new_op(Op::AutomationWrite { automation: record.resource.clone() });
                    self.shared.effects.push(Effect::Store { op, command: StoreCmd::DeleteAutomation { key } });
                }
                continue;
            }
            let now = self.shared.now.wall.to_iso();
            let mut rewrite = false;
            for run in record.runs.iter_mut().filter(|r| !r.ended()) {
                let started_at = match &run.lifecycle {
                    AutomationRunLifecycle::Running(l) => Some(l.started_at.clone()),
                    _ => None,
                };
                run.lifecycle = AutomationRunLifecycle::Failed(AutomationFailedRunLifecycle {
                    created_at: run.created_at().to_owned(),
                    started_at,
                    completed_at: now.clone(),
                    error: failure("the host stopped before the run ended"),
                });
                run.turn = None;
                rewrite = true;
            }
            // An older record, or one whose triggers changed on disk,
            // gets the occurrences it lacks from now.
            if record.definition.enabled && automation::schedules(&record.definition).any(|t| !record.next.contains_key(&t.id)) {
                let kept = record.clone();
                record.next = next_map(&record, Some(&kept), self.shared.now.wall);
                rewrite = true;
            }
            let uri = record.resource.clone();
            self.index_automation(&record);
            self.state.by_uri.insert(uri.clone(), Automation { record, shown: automation::RUNS_PAGE });
            if rewrite {
                crate::mark!("automation_restored_runs_failed");
                self.write_automation(&uri);
            }
        }
    }

    /// Adds `record`'s schedule occurrences, runs and pin to the indexes.
    fn index_automation(&mut self, record: &AutomationRecord) {
        if record.definition.enabled {
            for (id, at) in &record.next {
                self.state.due.insert((*at, record.resource.clone(), id.clone()));
            }
        }
        for r in &record.runs {
            self.state.runs.insert(r.resource.clone(), record.resource.clone());
        }
        if let Some(pin) = record.pinned() {
            self.state.pinned.entry(pin.to_owned()).or_default().insert(record.resource.clone());
        }
    }

    /// Takes `record`'s entries out of the indexes.
    fn unindex_automation(&mut self, record: &AutomationRecord) {
        for (id, at) in &record.next {
            self.state.due.remove(&(*at, record.resource.clone(), id.clone()));
        }
        for r in &record.runs {
            self.state.runs.remove(&r.resource);
        }
        if let Some(pin) = record.pinned() {
            if let Some(set) = self.state.pinned.get_mut(pin) {
                set.remove(&record.resource);
                if set.is_empty() {
                    self.state.pinned.remove(pin);
                }
            }
        }
    }

    /// Writes automation `uri`'s record.
    fn write_automation(&mut self, uri: &Uri) {
        let Some(a) = self.state.by_uri.get(uri) else { return };
        let record = Box::new(a.record.clone());
        let op = self.shared.new_op(Op::AutomationWrite { automation: uri.clone() });
        self.shared.effects.push(Effect::Store { op, command: StoreCmd::PutAutomation { record } });
    }

    /// Writes automation `uri` and tells catalogue subscribers its entry.
    fn publish(&mut self, uri: &Uri) {
        self.write_automation(uri);
        let Some(a) = self.state.by_uri.get(uri) else { return };
        let action = StateAction::AutomationSet(Box::new(AutomationSetAction { automation: a.record.entry(a.shown) }));
        self.shared.fan_out(&catalogue(), action, None);
    }

    /// Whether `conn` may change (update, remove, run) automation `uri`:
    /// its owner or an administrator; anybody on a host with no users
    /// directory.
    fn may_change(&self, conn: ConnId, uri: &Uri) -> Result<(), String> {
        if self.shared.config.users.is_none() {
            return Ok(());
        }
        let principal = self.shared.conns.get(&conn).and_then(|c| c.principal.as_ref());
        let owner = self.state.by_uri.get(uri).and_then(|a| a.record.owner.as_deref());
        if principal.is_some_and(|p| p.is_administrator() || Some(p.owner().as_str()) == owner) {
            return Ok(());
        }
        crate::mark!("automation_refused_not_owner");
        Err("Only the automation's owner can change or run it.".to_owned())
    }

    // ---- Client actions on `ahp-automations://` ----

    /// A client action on an automation channel: on the catalogue,
    /// `automation/createRequested`, `automation/updateRequested` and
    /// `automation/removed`; anything else is rejected. Accepted ones are
    /// echoed to the catalogue's subscribers (with the sender's origin),
    /// then the entry follows as `automation/set` (or the removal itself).
    /// Refusals come back as [`AutomationOut::Reject`].
    pub(crate) fn on_action(mut self, conn: ConnId, channel: Uri, action: StateAction, origin: Option<ActionOrigin>) -> Vec<AutomationOut> {
        if channel != AUTOMATIONS_URI {
            let reason = "no action is taken on a run's channel (run cancellation is not offered)".to_owned();
            self.outs.push(AutomationOut::Reject { conn, channel, action: Box::new(action), origin, reason });
            return self.outs;
        }
        let outcome = match &action {
            StateAction::AutomationCreateRequested(a) => self.create_automation(conn, &a.resource, &a.definition),
            StateAction::AutomationUpdateRequested(a) => self.update_automation(conn, &a.resource, &a.changes),
            StateAction::AutomationRemoved(a) => self.remove_automation_checked(conn, &a.resource),
            _ => Err("this action is not accepted from clients on ahp-automations://".to_owned()),
        };
        match outcome {
            Err(reason) => {
                crate::mark!("automation_action_rejected");
                self.outs.push(AutomationOut::Reject { conn, channel, action: Box::new(action), origin, reason });
            }
            Ok(then) => {
                self.shared.fan_out(&channel, action, origin);
                match then {
                    Then::Publish(uri) => self.publish(&uri),
                    Then::Removed(uri) => self.drop_automation(&uri, false),
                    Then::Nothing => {}
                }
            }
        }
        self.outs
    }

    fn create_automation(&mut self, conn: ConnId, resource: &Uri, definition: &ahp_types::state::AutomationDefinition) -> Result<Then, String> {
        self.shared.authorize(conn, Operation::SessionCreate).map_err(|e| e.message)?;
        automation::parse_resource(resource)?;
        if self.state.by_uri.contains_key(resource) {
            return Err(format!("resource {resource} already identifies an automation"));
        }
        if self.state.by_uri.len() >= automation::MAX_AUTOMATIONS {
            crate::mark!("automation_refused_limit");
            return Err(format!("this host keeps at most {} automations", automation::MAX_AUTOMATIONS));
        }
        check(definition, &self.shared.config, self.sessions)?;
        let now = self.shared.now.wall;
        let mut record = AutomationRecord {
            format: automation::RECORD_FORMAT,
            resource: resource.clone(),
            definition: definition.clone(),
            owner: self.shared.owner_of(conn),
            created_at: now.to_iso(),
            modified_at: now.to_iso(),
            run_count: automation::after_runs(definition).map(|_| 0),
            next: BTreeMap::new(),
            evaluated: BTreeMap::new(),
            runs: Vec::new(),
            next_run: 0,
        };
        record.next = next_map(&record, None, now);
        crate::mark!("automation_created");
        self.shared.log(LogLevel::Info, "automation.created", None, resource.clone());
        self.index_automation(&record);
        self.state.by_uri.insert(resource.clone(), Automation { record, shown: automation::RUNS_PAGE });
        Ok(Then::Publish(resource.clone()))
    }

    fn update_automation(&mut self, conn: ConnId, resource: &Uri, changes: &ahp_types::state::AutomationDefinitionPatch) -> Result<Then, String> {
        self.shared.authorize(conn, Operation::SessionCreate).map_err(|e| e.message)?;
        let Some(a) = self.state.by_uri.get(resource) else { return Err(format!("no automation {}", crate::ids::printable(resource))) };
        self.may_change(conn, resource)?;
        let old = a.record.clone();
        let mut d = old.definition.clone();
        if let Some(v) = &changes.title {
            d.title = v.clone();
        }
        if let Some(v) = &changes.message {
            d.message = v.clone();
        }
        if let Some(v) = &changes.session {
            d.session = v.clone();
        }
        if let Some(v) = changes.enabled {
            d.enabled = v;
        }
        if let Some(v) = &changes.triggers {
            d.triggers = v.clone();
        }
        if let Some(v) = &changes.disable_conditions {
            d.disable_conditions = Some(v.clone());
        }
        if let Some(v) = &changes.meta {
            d.meta = Some(v.clone());
        }
        check(&d, &self.shared.config, self.sessions)?;
        let mut record = old.clone();
        // A fresh allowance: a disabled→enabled change, or an afterRuns
        // condition added where there was none.
        record.run_count = match (automation::after_runs(&old.definition), automation::after_runs(&d)) {
            (_, None) => None,
            (None, Some(_)) => Some(0),
            (Some(_), Some(_)) if !old.definition.enabled && d.enabled => Some(0),
            (Some(_), Some(_)) => old.run_count.or(Some(0)),
        };
        record.definition = d;
        record.modified_at = self.shared.now.wall.to_iso();
        record.next = next_map(&record, Some(&old), self.shared.now.wall);
        self.unindex_automation(&old);
        self.index_automation(&record);
        if let Some(a) = self.state.by_uri.get_mut(resource) {
            a.record = record;
        }
        crate::mark!("automation_updated");
        Ok(Then::Publish(resource.clone()))
    }

    fn remove_automation_checked(&mut self, conn: ConnId, resource: &Uri) -> Result<Then, String> {
        self.shared.authorize(conn, Operation::SessionCreate).map_err(|e| e.message)?;
        if !self.state.by_uri.contains_key(resource) {
            // "Removing an unknown resource is a no-op."
            return Ok(Then::Nothing);
        }
        self.may_change(conn, resource)?;
        Ok(Then::Removed(resource.clone()))
    }

    /// Forgets automation `uri`: out of the indexes and the store; its
    /// active runs fail (their sessions go on as ordinary sessions).
    /// `announce`: catalogue subscribers are told `automation/removed`
    /// (a client's removal was echoed already).
    fn drop_automation(&mut self, uri: &Uri, announce: bool) {
        let Some(a) = self.state.by_uri.get(uri) else { return };
        let active: Vec<Uri> = a.record.runs.iter().filter(|r| !r.ended()).map(|r| r.resource.clone()).collect();
        for run in active {
            self.end_run(&run, End::Failed(failure("the automation was removed")));
        }
        let Some(a) = self.state.by_uri.remove(uri) else { return };
        self.unindex_automation(&a.record);
        for r in &a.record.runs {
            self.forget_run_waits(&r.resource);
            self.shared.retired.insert(r.resource.clone());
            for c in self.shared.conns.values_mut() {
                c.subscriptions.remove(&r.resource);
            }
        }
        if let Some(key) = a.record.key() {
            let op = self.shared.new_op(Op::AutomationWrite { automation: uri.clone() });
            self.shared.effects.push(Effect::Store { op, command: StoreCmd::DeleteAutomation { key } });
        }
        if announce {
            self.shared.fan_out(&catalogue(), StateAction::AutomationRemoved(AutomationRemovedAction { resource: uri.clone() }), None);
        }
        crate::mark!("automation_removed");
        self.shared.log(LogLevel::Info, "automation.removed", None, uri.clone());
    }

    // ---- Commands ----

    /// What every automation command checks first, in this order: its
    /// `params` parse as `T` (-32602), the connection holds `op` (-32009),
    /// and `channel` names the catalogue (-32602). The error is the answer.
    fn command_params<T: serde::de::DeserializeOwned>(
        &self,
        conn: ConnId,
        params: Value,
        op: Operation,
        channel: impl Fn(&T) -> &String,
    ) -> Result<T, ahp_types::messages::JsonRpcError> {
        let params: T = parse(params)?;
        self.shared.authorize(conn, op)?;
        if channel(&params) != AUTOMATIONS_URI {
            return Err(error(INVALID_PARAMS, format!("channel must be {AUTOMATIONS_URI}")));
        }
        Ok(params)
    }

    /// `runAutomation`: a manual run, whatever `enabled` says; the same
    /// `requestId` answers the run it made before. A run made is answered
    /// once its start is done ([`AutomationOut::Started`]).
    pub(crate) fn on_run(mut self, conn: ConnId, id: u64, params: Value) -> Vec<AutomationOut> {
        self.run_request(conn, id, params);
        self.outs
    }

    /// [`Auto::on_run`]'s checks and the run's start.
    fn run_request(&mut self, conn: ConnId, id: u64, params: Value) {
        let params: RunAutomationParams = match self.command_params(conn, params, Operation::ChatSend, |p: &RunAutomationParams| &p.channel) {
            Ok(p) => p,
            Err(e) => return self.shared.reply_error(conn, id, e),
        };
        if params.request_id.is_empty() || params.request_id.len() > automation::MAX_NAME_BYTES {
            return self.shared.reply_error(conn, id, error(INVALID_PARAMS, format!("requestId must be 1 to {} bytes", automation::MAX_NAME_BYTES)));
        }
        let Some(a) = self.state.by_uri.get(&params.automation) else {
            return self.shared.reply_error(conn, id, error(INVALID_PARAMS, format!("automation: no automation {}", crate::ids::printable(&params.automation))));
        };
        if let Some(run) = a.record.runs.iter().find(|r| r.request_id.as_deref() == Some(&params.request_id)) {
            crate::mark!("automation_run_request_repeated");
            let resource = run.resource.clone();
            return self.shared.reply(conn, id, json!({"resource": resource}));
        }
        if let Err(reason) = self.may_change(conn, &params.automation) {
            return self.shared.reply_error(conn, id, error(PERMISSION_DENIED, reason));
        }
        let origin = AutomationRunOrigin::Manual(AutomationManualRunOrigin {});
        if let Err(reason) = self.start_run(&params.automation, origin, Some(params.request_id), Some((conn, id))) {
            self.shared.reply_error(conn, id, error(INVALID_PARAMS, reason));
        }
    }

    /// `fetchAutomationRuns`: one more page of ended runs into the entry,
    /// told every catalogue subscriber as `automation/set`. A cursor this
    /// host did not give is -32602.
    pub(crate) fn on_fetch_runs(&mut self, conn: ConnId, id: u64, params: Value) {
        let params: FetchAutomationRunsParams = match self.command_params(conn, params, Operation::SessionList, |p: &FetchAutomationRunsParams| &p.channel) {
            Ok(p) => p,
            Err(e) => return self.shared.reply_error(conn, id, e),
        };
        let Some(a) = self.state.by_uri.get(&params.automation) else {
            return self.shared.reply_error(conn, id, error(INVALID_PARAMS, format!("automation: no automation {}", crate::ids::printable(&params.automation))));
        };
        let from = match params.cursor.as_deref() {
            None => a.shown,
            Some(c) => match automation::parse_runs_cursor(c) {
                Some(n) => n,
                None => {
                    crate::mark!("automation_cursor_refused");
                    return self.shared.reply_error(conn, id, error(INVALID_PARAMS, "cursor is not one this host gave (runsNextCursor)"));
                }
            },
        };
        let shown = from.saturating_add(automation::RUNS_PAGE).min(automation::RUN_HISTORY_LIMIT);
        if let Some(a) = self.state.by_uri.get_mut(&params.automation) {
            a.shown = a.shown.max(shown);
        }
        crate::mark!("automation_runs_fetched");
        let Some(a) = self.state.by_uri.get(&params.automation) else { return };
        let action = StateAction::AutomationSet(Box::new(AutomationSetAction { automation: a.record.entry(a.shown) }));
        self.shared.fan_out(&catalogue(), action, None);
        self.shared.reply(conn, id, json!({}));
    }

    /// `listAutomationTriggerDefinitions`: this host defines no event
    /// trigger types (schedules are AHP's own and never listed).
    pub(crate) fn on_list_trigger_definitions(&mut self, conn: ConnId, id: u64, params: Value) {
        if let Err(e) = self.command_params(conn, params, Operation::SessionList, |p: &ListAutomationTriggerDefinitionsParams| &p.channel) {
            return self.shared.reply_error(conn, id, e);
        }
        self.shared.reply(conn, id, json!({"items": []}));
    }

    // ---- Schedules ----

    /// Evaluates the first schedule occurrence due at the current wall
    /// time, once (docs/DECISIONS.md, 26): on time (at most
    /// [`automation::MISFIRE_GRACE_MS`] late, and the only one passed) it
    /// makes a run; missed, `skip` makes none and `runOnce` (the default)
    /// one catch-up run for all it missed. Either way the trigger's next
    /// occurrence is the first after now, written with the run. `None` when
    /// none is due, or while the host stops (the record keeps the
    /// occurrence, evaluated after the restart). The timer table calls it
    /// until `None`, applying each occurrence's outs before the next is
    /// evaluated (`host/timers.rs`).
    pub(crate) fn fire_next(mut self) -> Option<Vec<AutomationOut>> {
        if self.stopping {
            return None;
        }
        let now = self.shared.now.wall;
        let first = self.state.due.first().filter(|(at, _, _)| *at <= now).cloned()?;
        self.state.due.remove(&first);
        self.fire(first);
        Some(self.outs)
    }

    /// [`Auto::fire_next`] for occurrence `at` of `trigger` of automation
    /// `uri`, taken out of the index.
    fn fire(&mut self, (at, uri, trigger): (WallTime, Uri, String)) {
        let now = self.shared.now.wall;
        let Some(a) = self.state.by_uri.get(&uri) else { return };
        let Some(t) = automation::schedules(&a.record.definition).find(|t| t.id == trigger).cloned() else { return };
        let schedule = Schedule::parse(&t.schedule.expression, &t.schedule.time_zone).ok();
        let through = a.record.evaluated.get(&trigger).map_or(now, |e| (*e).max(now));
        let next = schedule.as_ref().and_then(|s| s.next_after(through.0)).map(WallTime);
        let missed_more = schedule.as_ref().and_then(|s| s.next_after(at.0)).is_some_and(|n| n <= now.0);
        let on_time = now.0 - at.0 <= automation::MISFIRE_GRACE_MS && !missed_more;
        let catch_up = match (&t.misfire_policy, on_time) {
            (_, true) => Some(false),
            (Some(AutomationMisfirePolicy::Skip), false) => None,
            (_, false) => Some(true),
        };
        let definition = a.record.definition.clone();
        let after_date = automation::after_date(&definition).is_some_and(|d| at > d);
        let cap = automation::after_runs(&definition);
        let count = a.record.run_count.unwrap_or(0);
        let Some(a) = self.state.by_uri.get_mut(&uri) else { return };
        a.record.next.remove(&trigger);
        // Everything up to now is evaluated, whatever comes of it.
        let through = a.record.evaluated.get(&trigger).map_or(now, |e| (*e).max(now));
        a.record.evaluated.insert(trigger.clone(), through);
        let mut run = None;
        if after_date || cap.is_some_and(|m| count >= m) {
            crate::mark!("automation_disabled_by_condition");
            self.disable(&uri);
        } else if let Some(catch_up) = catch_up {
            if let (Some(a), Some(_)) = (self.state.by_uri.get_mut(&uri), cap) {
                a.record.run_count = Some(count + 1);
            }
            run = Some(catch_up);
            if let Some(next) = next {
                self.set_next(&uri, &trigger, next);
            }
            if cap.is_some_and(|m| count + 1 >= m) {
                self.disable(&uri);
            }
        } else {
            crate::mark!("automation_misfire_skipped");
            self.shared.log(LogLevel::Info, "automation.misfire_skipped", None, format!("{uri} {trigger}: missed {}", at.to_iso()));
            if let Some(next) = next {
                self.set_next(&uri, &trigger, next);
            }
        }
        match run {
            Some(catch_up) => {
                if catch_up {
                    crate::mark!("automation_fired_catch_up");
                } else {
                    crate::mark!("automation_fired");
                }
                let origin = AutomationRunOrigin::Trigger(AutomationTriggeredRunOrigin {
                    trigger_id: trigger.clone(),
                    scheduled_for: Some(at.to_iso()),
                    catch_up: catch_up.then_some(true),
                    event: None,
                });
                if let Err(reason) = self.start_run(&uri, origin, None, None) {
                    self.shared.log(LogLevel::Warn, "automation.run_refused", None, format!("{uri} {trigger}: {reason}"));
                    self.publish(&uri);
                }
            }
            None => self.publish(&uri),
        }
    }

    fn set_next(&mut self, uri: &Uri, trigger: &str, at: WallTime) {
        let Some(a) = self.state.by_uri.get_mut(uri) else { return };
        if !a.record.definition.enabled {
            return;
        }
        if let Some(old) = a.record.next.insert(trigger.to_owned(), at) {
            self.state.due.remove(&(old, uri.clone(), trigger.to_owned()));
        }
        self.state.due.insert((at, uri.clone(), trigger.to_owned()));
    }

    /// Sets `enabled` false (a disable condition was met): no occurrence
    /// stays indexed.
    fn disable(&mut self, uri: &Uri) {
        let Some(a) = self.state.by_uri.get_mut(uri) else { return };
        a.record.definition.enabled = false;
        for (id, at) in std::mem::take(&mut a.record.next) {
            self.state.due.remove(&(at, uri.clone(), id));
        }
    }

    // ---- Runs ----

    /// Makes a run of automation `uri` and starts it: written with the
    /// record, then its session made (or the pinned one used), then
    /// [`AutomationOut::Started`] (`answer`: the `runAutomation` to answer).
    /// `Err` when no run may be made now (too many active runs).
    fn start_run(&mut self, uri: &Uri, origin: AutomationRunOrigin, request_id: Option<String>, answer: Option<(ConnId, u64)>) -> Result<Uri, String> {
        let now = self.shared.now.wall.to_iso();
        let Some(a) = self.state.by_uri.get_mut(uri) else { return Err(format!("no automation {uri}")) };
        if a.record.runs.iter().filter(|r| !r.ended()).count() >= automation::MAX_ACTIVE_RUNS {
            crate::mark!("automation_run_refused_active");
            return Err(format!("automation {uri} already has {} runs that have not ended", automation::MAX_ACTIVE_RUNS));
        }
        let id = automation::parse_resource(uri).map(|r| r.id).unwrap_or_default();
        a.record.next_run += 1;
        let run = format!("{RUN_SCHEME}:/{id}.{}", a.record.next_run);
        a.record.runs.insert(0, RunRecord {
            resource: run.clone(),
            origin,
            lifecycle: AutomationRunLifecycle::Pending(AutomationPendingRunLifecycle { created_at: now }),
            sessions: Vec::new(),
            request_id,
            turn: None,
        });
        let dropped = a.record.prune();
        for d in dropped {
            self.state.runs.remove(&d);
            self.forget_run_waits(&d);
        }
        self.state.runs.insert(run.clone(), uri.clone());
        self.shared.log(LogLevel::Info, "automation.run", None, format!("{run} of {uri}"));
        // Written before any session is touched.
        self.write_automation(uri);
        let pinned = self.state.by_uri.get(uri).and_then(|a| a.record.pinned().map(str::to_owned));
        match pinned {
            Some(session) => self.run_pinned(uri, &run, &session),
            None => self.run_fresh(uri, &run),
        }
        // After what the session's start asked of the host.
        self.outs.push(AutomationOut::Started { automation: uri.clone(), run: run.clone(), answer });
        Ok(run)
    }

    /// Run `run` of `automation` started ([`AutomationOut::Started`]): the
    /// automation's entry written and published, and the `runAutomation`
    /// that made it (`answer`) told the run's resource.
    pub(crate) fn run_started(mut self, automation: &Uri, run: &Uri, answer: Option<(ConnId, u64)>) {
        self.publish(automation);
        if let Some((conn, id)) = answer {
            crate::mark!("automation_run_manual");
            self.shared.reply(conn, id, json!({"resource": run}));
        }
    }

    /// A run in a fresh session made from the template: provisional (as a
    /// client's `createSession` makes one), owned as the automation is,
    /// recording its origin; the message is queued once its agent started.
    fn run_fresh(&mut self, uri: &Uri, run: &Uri) {
        let Some(a) = self.state.by_uri.get(uri) else { return };
        let (template, owner) = (a.record.definition.session.clone(), a.record.owner.clone());
        if let Err(reason) = owner_holds(&self.shared.config, owner.as_deref(), Operation::SessionCreate) {
            return self.end_run(run, End::Failed(failure(reason)));
        }
        let provider = match template.provider.clone().or_else(|| self.shared.config.agents.first().map(|a| a.provider.clone())) {
            Some(p) if self.shared.config.agents.iter().any(|a| a.provider == p) => p,
            Some(p) => return self.end_run(run, End::Failed(failure(format!("no agent with provider {}", crate::ids::printable(&p))))),
            None => return self.end_run(run, End::Failed(failure("no agent is configured"))),
        };
        let folders = template.working_directories.clone().unwrap_or_default();
        if let Err(reason) = super::trusted_folders(&self.shared.config, self.sessions, self.detached, &folders) {
            return self.end_run(run, End::Failed(failure(reason)));
        }
        if let Err(reason) = self.shared.config.policy.check(None, &provider, folders.first().map(String::as_str)) {
            return self.end_run(run, End::Failed(failure(reason)));
        }
        let rid = loop {
            let rid = crate::ids::ResourceId { scheme: "ahp-session".to_owned(), id: format!("auto-{}", self.shared.rng.hex_id()) };
            if !self.sessions.contains_key(&rid.uri()) && !self.tombstones.contains_key(&rid.uri()) {
                break rid;
            }
        };
        let asked: serde_json::Map<String, Value> = template.config.clone().unwrap_or_default().into_iter().collect();
        // Settled as for a folder in no repository: a run is made with no
        // client to wait on, so its folder's repository is not read first
        // (docs/DECISIONS.md, 25).
        let (config, offer) = crate::session_config::settle(&asked, &crate::git::RepoFacts::not_a_repo(), None);
        let working_directories = crate::folders::initial(&folders, self.shared.agent_takes_peers(&provider));
        // "An automation [is] work nobody owns, and the session records no
        // scope"; the owner is the automation's, so its grants apply.
        let mut record = crate::record::SessionRecord::new_session(&rid, provider.into(), working_directories, config, offer, owner, None, None, self.shared.now.wall);
        record.tools = Some(Box::new(crate::record::ToolsRecord { automation: Some(crate::record::AutomationOrigin { automation: uri.clone(), run: run.clone() }), ..Default::default() }));
        let session_uri = rid.uri();
        let can_resume = self.shared.agent_can_resume(&record.provider);
        let session = Session::provisional(record, crate::session::Asker::Client { conn: AUTOMATION_CONN, id: 0 }, can_resume, self.shared);
        self.outs.push(AutomationOut::AddSession { uri: session_uri, session: Box::new(session), chat: rid.default_chat_uri(), run: run.clone() });
    }

    /// Session `session`, made for run `run`, is in the table and its
    /// agent asked to start ([`AutomationOut::AddSession`]): the run waits
    /// for the start's answer and says the session is its own.
    pub(crate) fn session_added(mut self, run: &Uri, session: &Uri) {
        self.state.starting.insert(session.clone(), run.clone());
        self.link_session(run, session);
        crate::mark!("automation_run_fresh_session");
        self.shared.log(LogLevel::Info, "session.creating", Some(session.clone()), format!("for {run}"));
    }

    /// A run in the pinned session: its message queued on the default chat,
    /// the session woken first when it sleeps (the wake's end queues it;
    /// a failed wake fails the run and the session stays asleep).
    fn run_pinned(&mut self, uri: &Uri, run: &Uri, session: &str) {
        let owner = self.state.by_uri.get(uri).and_then(|a| a.record.owner.clone());
        if let Err(reason) = owner_holds(&self.shared.config, owner.as_deref(), Operation::ChatSend) {
            return self.end_run(run, End::Failed(failure(reason)));
        }
        let session: Uri = session.to_owned();
        if !pinnable(self.sessions, &session) {
            crate::mark!("automation_run_pinned_gone");
            return self.end_run(run, End::Failed(failure(format!("the pinned session {session} is not there to run in"))));
        }
        let Some(s) = self.sessions.get(&session) else { return };
        let chat = s.record().default_chat().into_owned();
        let full = s.record().chats.iter().find(|c| c.resource == chat).is_some_and(|c| c.queued.len() >= self.shared.config.limits.queued_messages_per_chat);
        if full {
            return self.end_run(run, End::Failed(failure(format!("the pinned session {session} already has as many messages queued as it may"))));
        }
        let folders = s.record().working_directories.to_vec();
        let phase = s.phase().clone();
        self.link_session(run, &session);
        match phase {
            Phase::Live { .. } => self.queue_run_message(run, &session),
            Phase::Asleep | Phase::Waking(_) => {
                if let Err(reason) = super::trusted_folders(&self.shared.config, self.sessions, self.detached, &folders) {
                    return self.end_run(run, End::Failed(failure(format!("the session was not woken: {reason}"))));
                }
                crate::mark!("automation_run_wakes_pinned");
                self.state.waking.entry(session.clone()).or_default().push(run.clone());
                self.outs.push(AutomationOut::Wake { session });
            }
            Phase::Starting(_) | Phase::Disposing(_) => {}
        }
    }

    /// Says on the run's channel that `session` is its (primary) session.
    fn link_session(&mut self, run: &Uri, session: &Uri) {
        let Some(auto) = self.state.runs.get(run).cloned() else { return };
        let Some(r) = self.state.by_uri.get_mut(&auto).and_then(|a| a.record.runs.iter_mut().find(|r| r.resource == *run)) else { return };
        if r.sessions.contains(session) {
            return;
        }
        r.sessions.push(session.clone());
        self.shared.fan_out(run, StateAction::AutomationRunSessionSet(AutomationRunSessionSetAction { session: session.clone() }), None);
        self.shared.fan_out(run, StateAction::AutomationRunPrimarySessionChanged(AutomationRunPrimarySessionChangedAction { primary_session: Some(session.clone()) }), None);
    }

    /// [`AutomationOut::Queue`]: run `run`'s message queued in `session`.
    pub(crate) fn queue_run(mut self, run: &Uri, session: &Uri) -> Vec<AutomationOut> {
        self.queue_run_message(run, session);
        self.outs
    }

    /// Queues the run's message on `session`'s default chat (started at
    /// once on a live idle chat, behind the running turn otherwise): the
    /// run is running from here, waiting for that turn's end.
    fn queue_run_message(&mut self, run: &Uri, session: &Uri) {
        let Some(auto) = self.state.runs.get(run).cloned() else { return };
        let Some(a) = self.state.by_uri.get(&auto) else { return };
        let mut message = a.record.definition.message.clone();
        let sender = a.record.owner.clone().unwrap_or_default();
        message.meta.get_or_insert_with(Default::default).insert(automation::RUN_META_KEY.to_owned(), json!({"automation": auto, "run": run}));
        let Some(chat) = self.sessions.get(session).map(|s| s.record().default_chat().into_owned()) else { return };
        let turn_id = format!("run-{}", self.shared.rng.hex_id());
        let now = self.shared.now.wall.to_iso();
        if let Some(r) = self.state.by_uri.get_mut(&auto).and_then(|a| a.record.runs.iter_mut().find(|r| r.resource == *run)) {
            r.lifecycle = AutomationRunLifecycle::Running(AutomationRunningRunLifecycle { created_at: r.created_at().to_owned(), started_at: now });
            r.turn = Some(RunTurn { session: session.clone(), chat: chat.clone(), turn_id: turn_id.clone() });
        }
        self.state.awaiting.entry(session.clone()).or_default().insert(run.clone());
        crate::mark!("automation_run_queued");
        self.tell_lifecycle(&auto, run);
        self.publish(&auto);
        self.outs.push(AutomationOut::Deliver { session: session.clone(), chat, turn_id, message: Box::new(message), sender });
    }

    /// Tells the run's subscribers its lifecycle as the record holds it.
    fn tell_lifecycle(&mut self, auto: &Uri, run: &Uri) {
        let Some(r) = self.state.by_uri.get(auto).and_then(|a| a.record.runs.iter().find(|r| r.resource == *run)) else { return };
        let action = StateAction::AutomationRunLifecycleChanged(Box::new(AutomationRunLifecycleChangedAction { lifecycle: r.lifecycle.clone() }));
        self.shared.fan_out(run, action, None);
    }

    /// Ends run `run` as `end` (an ended run is left as it is): written,
    /// told on its channel and in the catalogue.
    fn end_run(&mut self, run: &Uri, end: End) {
        let Some(auto) = self.state.runs.get(run).cloned() else { return };
        let now = self.shared.now.wall.to_iso();
        let Some(r) = self.state.by_uri.get_mut(&auto).and_then(|a| a.record.runs.iter_mut().find(|r| r.resource == *run)) else { return };
        if r.ended() {
            return;
        }
        let created_at = r.created_at().to_owned();
        let started_at = match &r.lifecycle {
            AutomationRunLifecycle::Running(l) => Some(l.started_at.clone()),
            _ => None,
        };
        r.lifecycle = match end {
            End::Completed => {
                crate::mark!("automation_run_completed");
                AutomationRunLifecycle::Completed(AutomationCompletedRunLifecycle { created_at, started_at: started_at.unwrap_or_else(|| now.clone()), completed_at: now, usage: None })
            }
            End::Failed(error) => {
                crate::mark!("automation_run_failed");
                self.shared.log(LogLevel::Warn, "automation.run_failed", None, format!("{run}: {}", error.message));
                AutomationRunLifecycle::Failed(AutomationFailedRunLifecycle { created_at, started_at, completed_at: now, error })
            }
            End::Cancelled => AutomationRunLifecycle::Cancelled(AutomationCancelledRunLifecycle { created_at, started_at, completed_at: now }),
        };
        r.turn = None;
        let dropped = self.state.by_uri.get_mut(&auto).map(|a| a.record.prune()).unwrap_or_default();
        self.forget_run_waits(run);
        self.tell_lifecycle(&auto, run);
        for d in dropped {
            self.state.runs.remove(&d);
        }
        self.publish(&auto);
    }

    /// Takes run `run` out of what waits on sessions.
    fn forget_run_waits(&mut self, run: &Uri) {
        self.state.starting.retain(|_, r| r != run);
        self.state.waking.retain(|_, runs| {
            runs.retain(|r| r != run);
            !runs.is_empty()
        });
        self.state.awaiting.retain(|_, runs| {
            runs.remove(run);
            !runs.is_empty()
        });
    }

    // ---- Hooks from a session's life ----

    /// A session made for a run answered its start: `refused` is why its
    /// creation failed (the run fails with it), else the session is live
    /// and the message is queued.
    pub(crate) fn run_session_answered(mut self, session: &Uri, refused: Option<&str>) -> Vec<AutomationOut> {
        let Some(run) = self.state.starting.get(session).cloned() else { return self.outs };
        match refused {
            Some(message) => {
                self.state.starting.remove(session);
                crate::mark!("automation_run_start_failed");
                self.end_run(&run, End::Failed(failure(message)));
            }
            None if self.sessions.get(session).is_some_and(|s| s.phase().is_live()) => {
                self.state.starting.remove(session);
                self.queue_run_message(&run, session);
            }
            None => {}
        }
        self.outs
    }

    /// A wake of `session` ended (`failed`: why it did not): the pinned
    /// runs that waited for it queue their message, or fail with the
    /// backend's error, the session left asleep. Each queued run is an
    /// [`AutomationOut::Queue`], so one run's delivery is done before the
    /// next run's message is made.
    pub(crate) fn runs_after_wake(mut self, session: &Uri, failed: Option<&str>) -> Vec<AutomationOut> {
        let Some(runs) = self.state.waking.remove(session) else { return self.outs };
        for run in runs {
            match failed {
                Some(reason) => {
                    crate::mark!("automation_run_wake_failed");
                    self.end_run(&run, End::Failed(failure(reason)));
                }
                None => self.outs.push(AutomationOut::Queue { run, session: session.clone() }),
            }
        }
        self.outs
    }

    /// A turn of `chat` in `session` ended: the runs waiting for it end as
    /// it did (completed; failed with the turn's error; cancelled).
    pub(crate) fn runs_follow_turn(mut self, session: &Uri, chat: &Uri) -> Vec<AutomationOut> {
        let Some(runs) = self.state.awaiting.get(session).cloned() else { return self.outs };
        for run in runs {
            let Some((_, r)) = self.state.find_run(&run) else { continue };
            let Some(turn) = r.turn.clone().filter(|t| t.chat == *chat) else { continue };
            let state = self.sessions.get(session).and_then(|s| s.resident()).and_then(|res| res.chats.get(chat));
            let Some(ended) = state.and_then(|c| c.turns.iter().rev().find(|t| t.id == turn.turn_id)) else { continue };
            let end = match ended.state {
                TurnState::Complete => End::Completed,
                TurnState::Cancelled => End::Cancelled,
                TurnState::Error => {
                    let message = ended.response_parts.iter().rev().find_map(|p| match p {
                        ResponsePart::Error(e) => Some(e.error.message.clone()),
                        _ => None,
                    });
                    End::Failed(failure(message.unwrap_or_else(|| "the run's turn ended in an error".to_owned())))
                }
            };
            self.end_run(&run, end);
        }
        self.outs
    }

    /// Session `uri` was disposed: runs waiting on it fail, and the
    /// automations pinned to it are removed (docs/DECISIONS.md, 25).
    pub(crate) fn follow_dispose(mut self, uri: &Uri) -> Vec<AutomationOut> {
        let mut runs: Vec<Uri> = self.state.awaiting.get(uri).into_iter().flatten().cloned().collect();
        runs.extend(self.state.waking.get(uri).into_iter().flatten().cloned());
        runs.extend(self.state.starting.get(uri).cloned());
        for run in runs {
            self.end_run(&run, End::Failed(failure(format!("session {uri} was disposed"))));
        }
        let pinned: Vec<Uri> = self.state.pinned.get(uri).into_iter().flatten().cloned().collect();
        for a in pinned {
            crate::mark!("automation_removed_with_pinned_session");
            self.drop_automation(&a, true);
        }
        self.outs
    }
}

/// What an accepted action leads to.
enum Then {
    /// The automation's entry changed: write it and say `automation/set`.
    Publish(Uri),
    /// It goes.
    Removed(Uri),
    /// Nothing (removing an unknown automation).
    Nothing,
}

/// How a run ends.
enum End {
    Completed,
    Failed(ErrorInfo),
    Cancelled,
}

impl crate::HostView<'_> {
    /// Every automation's record, by resource (for the invariants and the
    /// simulator).
    pub fn automations(&self) -> impl Iterator<Item = &AutomationRecord> + '_ {
        self.host.automations.by_uri.values().map(|a| &a.record)
    }

    /// The schedule index (next occurrence, automation, trigger), in time
    /// order (for `inv_automation_index_consistent`).
    pub fn automation_due_index(&self) -> &BTreeSet<(WallTime, Uri, String)> {
        &self.host.automations.due
    }

    /// Whether work kept in wall-clock time is due at `wall`: an agent's
    /// wake or an automation's occurrence. Their deadlines are folded into
    /// `next_deadline` as the monotonic time the wall clock reached them at
    /// the last input (`host/timers.rs`, `Due::project`), so after the wall clock jumps one can be due with no
    /// deadline passed; the next input of any kind runs it (the simulator's
    /// checkers ask this to tell such a step from one where only a frame
    /// acted; seed 611).
    pub fn wall_clock_work_due(&self, wall: WallTime) -> bool {
        self.wake_index().first().is_some_and(|(at, _, _)| *at <= wall) || self.host.automations.due.first().is_some_and(|(at, _, _)| *at <= wall)
    }

    /// The automations pinned to each session (for the invariants: a
    /// disposed session has none).
    pub fn automation_pins(&self) -> &BTreeMap<Uri, BTreeSet<Uri>> {
        &self.host.automations.pinned
    }
}
