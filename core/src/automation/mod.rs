//! Automations (AHP 1.0's `ahp-automations://` channel; issue 24): the
//! durable record of one automation, the checks a definition must pass,
//! and the protocol state built from the record. The host's rules over
//! them (actions, commands, fires, runs) are `crate::host::automations`;
//! schedules are [`cron`].
//!
//! Each automation is one record in the store (`<data-dir>/automations/
//! <key>.json`, [`AutomationRecord`]), holding its definition, who owns it,
//! the next occurrence of each schedule trigger still to be evaluated, and
//! its runs newest first (at most [`RUN_HISTORY_LIMIT`] ended ones, active
//! ones besides). The `ahp-automations://` state and every
//! `ahp-automation-run:` state are built from records on demand, so what a
//! client is told is what the store holds.

pub mod cron;

use std::collections::{BTreeMap, BTreeSet};

use ahp_types::state::{
    AutomationDefinition, AutomationDisableCondition, AutomationEntry, AutomationMisfirePolicy, AutomationOperation, AutomationRunLifecycle,
    AutomationRunOrigin, AutomationRunState, AutomationRunSummary, AutomationTrigger, MessageKind,
};
use ahp_types::Uri;
use serde::{Deserialize, Serialize};

use crate::time::WallTime;

/// The catalogue channel.
pub const AUTOMATIONS_URI: &str = "ahp-automations://";
/// The scheme of an automation's resource (`ahp-automation:/<id>`).
pub const AUTOMATION_SCHEME: &str = "ahp-automation";
/// The scheme of a run's channel (`ahp-automation-run:/<id>.<n>`).
pub const RUN_SCHEME: &str = "ahp-automation-run";
/// The `_meta` key of a definition pinning it to an existing session
/// (docs/DECISIONS.md, 25): its runs go to that session's default chat,
/// waking it, instead of a fresh session.
pub const PIN_META_KEY: &str = "ahpd.session";
/// The `_meta` key on an entry naming its owner (`user:<id>`, absent on a
/// host with no users directory).
pub const OWNER_META_KEY: &str = "ahpd.owner";
/// The `_meta` key on a run's first message naming its automation and run.
pub const RUN_META_KEY: &str = "ahpd.automation";
/// Ended runs kept per automation (`AutomationCapabilities.runHistoryLimit`);
/// active runs are not counted.
pub const RUN_HISTORY_LIMIT: usize = 100;
/// Runs an entry shows at first, and how many more each
/// `fetchAutomationRuns` adds.
pub const RUNS_PAGE: usize = 10;
/// Automations a host keeps at most.
pub const MAX_AUTOMATIONS: usize = 1_000;
/// Runs of one automation not yet ended at most: a schedule that fires
/// faster than its runs end is refused new ones past this.
pub const MAX_ACTIVE_RUNS: usize = 8;
/// Triggers one definition may hold.
pub const MAX_TRIGGERS: usize = 16;
/// The longest title, trigger id or `requestId`, in bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// The longest message text, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;
/// How late a schedule's occurrence may be taken and still count as on
/// time, in ms: later, it was missed (the host was stopped, or the wall
/// clock jumped past it) and its misfire policy decides
/// (docs/DECISIONS.md, 26).
pub const MISFIRE_GRACE_MS: i64 = 60_000;
/// The store's record format.
pub const RECORD_FORMAT: u32 = 1;

/// One automation as the store keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AutomationRecord {
    /// [`RECORD_FORMAT`].
    pub format: u32,
    /// `ahp-automation:/<id>`.
    pub resource: Uri,
    /// The definition as last accepted.
    pub definition: AutomationDefinition,
    /// Whose it is: the creating connection's principal (`user:<id>`,
    /// `plugin:<name>`, `root:<host>`); `None` on a host with no users
    /// directory (docs/DECISIONS.md, 25).
    #[serde(default)]
    pub owner: Option<String>,
    /// ISO-8601 creation time.
    pub created_at: String,
    /// ISO-8601 time of the last definition change.
    pub modified_at: String,
    /// Scheduled runs counted against the current `afterRuns` allowance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_count: Option<i64>,
    /// Per schedule trigger id, its next occurrence still to be evaluated
    /// (wall ms): present only while the automation is enabled. A fire
    /// moves it in the same write that records its run, so an occurrence
    /// makes at most one run whatever crashes.
    #[serde(default)]
    pub next: BTreeMap<String, WallTime>,
    /// Per schedule trigger id, the wall time up to which its occurrences
    /// were evaluated: a later occurrence is the earliest any change may
    /// schedule, so a wall clock set back and an update or a re-enable
    /// never bring an evaluated occurrence back (one occurrence, at most
    /// one run).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub evaluated: BTreeMap<String, WallTime>,
    /// Its runs, newest first.
    #[serde(default)]
    pub runs: Vec<RunRecord>,
    /// The number the next run takes (`<id>.<n>`).
    #[serde(default)]
    pub next_run: u64,
}

/// One run as its automation's record keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRecord {
    /// `ahp-automation-run:/<id>.<n>`.
    pub resource: Uri,
    /// Why it exists.
    pub origin: AutomationRunOrigin,
    /// Where it is.
    pub lifecycle: AutomationRunLifecycle,
    /// Its session (the fresh one, or the pinned one).
    #[serde(default)]
    pub sessions: Vec<Uri>,
    /// The `requestId` of the `runAutomation` that made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The turn whose end ends the run, once its message was queued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<RunTurn>,
}

/// The turn a run waits for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunTurn {
    /// The session.
    pub session: Uri,
    /// The chat.
    pub chat: Uri,
    /// The turn id (the queued message's).
    pub turn_id: String,
}

impl RunRecord {
    /// Whether it ended (completed, failed or cancelled).
    pub fn ended(&self) -> bool {
        matches!(self.lifecycle, AutomationRunLifecycle::Completed(_) | AutomationRunLifecycle::Failed(_) | AutomationRunLifecycle::Cancelled(_))
    }

    /// Its channel's state.
    pub fn state(&self, automation: &Uri) -> AutomationRunState {
        AutomationRunState {
            resource: self.resource.clone(),
            automation: automation.clone(),
            origin: self.origin.clone(),
            lifecycle: self.lifecycle.clone(),
            sessions: self.sessions.clone(),
            primary_session: self.sessions.first().cloned(),
            meta: None,
        }
    }

    fn summary(&self, automation: &Uri) -> AutomationRunSummary {
        AutomationRunSummary {
            resource: self.resource.clone(),
            automation: automation.clone(),
            origin: self.origin.clone(),
            lifecycle: self.lifecycle.clone(),
            primary_session: self.sessions.first().cloned(),
            session_count: self.sessions.len() as i64,
            meta: None,
        }
    }

    /// When it was made (its lifecycle's `createdAt`).
    pub fn created_at(&self) -> &str {
        match &self.lifecycle {
            AutomationRunLifecycle::Pending(l) => &l.created_at,
            AutomationRunLifecycle::Running(l) => &l.created_at,
            AutomationRunLifecycle::Completed(l) => &l.created_at,
            AutomationRunLifecycle::Failed(l) => &l.created_at,
            AutomationRunLifecycle::Cancelled(l) => &l.created_at,
        }
    }
}

impl AutomationRecord {
    /// The store key (`ahp-automation@<id>`), or `None` when the resource
    /// is not a valid automation URI.
    pub fn key(&self) -> Option<String> {
        parse_resource(&self.resource).ok().map(|id| id.store_key())
    }

    /// The session its runs are pinned to, if any.
    pub fn pinned(&self) -> Option<&str> {
        pinned_session(&self.definition)
    }

    /// Whether its automatic triggers may run.
    pub fn enabled(&self) -> bool {
        self.definition.enabled
    }

    /// Drops the oldest ended runs past [`RUN_HISTORY_LIMIT`]; returns the
    /// channels dropped.
    pub fn prune(&mut self) -> Vec<Uri> {
        let mut ended = 0;
        let mut dropped = Vec::new();
        self.runs.retain(|r| {
            if !r.ended() {
                return true;
            }
            ended += 1;
            if ended <= RUN_HISTORY_LIMIT {
                true
            } else {
                dropped.push(r.resource.clone());
                false
            }
        });
        dropped
    }

    /// The catalogue's entry for it, showing its newest `shown` runs (every
    /// active run whatever `shown` says).
    pub fn entry(&self, shown: usize) -> AutomationEntry {
        let mut runs = Vec::new();
        let mut ended = 0;
        let mut more = false;
        for r in &self.runs {
            if r.ended() {
                if ended >= shown {
                    more = true;
                    continue;
                }
                ended += 1;
            }
            runs.push(r.summary(&self.resource));
        }
        let next_run_at = self.definition.enabled.then(|| self.next.values().min().map(|t| t.to_iso())).flatten();
        let meta = self.owner.as_ref().map(|o| [(OWNER_META_KEY.to_owned(), serde_json::Value::String(o.clone()))].into_iter().collect());
        AutomationEntry {
            resource: self.resource.clone(),
            definition: self.definition.clone(),
            next_run_at,
            run_count: self.run_count,
            runs,
            runs_next_cursor: more.then(|| runs_cursor(ended)),
            operations: vec![AutomationOperation::Update, AutomationOperation::Remove, AutomationOperation::Run],
            customizations: None,
            created_at: self.created_at.clone(),
            modified_at: self.modified_at.clone(),
            meta,
        }
    }
}

/// The cursor an entry gives when `shown` ended runs are in it and more
/// are kept.
pub fn runs_cursor(shown: usize) -> String {
    format!("runs:{shown}")
}

/// The number of ended runs a cursor says were shown; `None` for a cursor
/// this host did not give (refused at the edge as -32602).
pub fn parse_runs_cursor(cursor: &str) -> Option<usize> {
    let n = cursor.strip_prefix("runs:")?;
    if n.is_empty() || n.len() > 4 || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok().filter(|n| *n <= RUN_HISTORY_LIMIT)
}

/// `ahp-automation:/<id>` checked: the scheme, and an id the store can name
/// a file by.
pub fn parse_resource(uri: &str) -> Result<crate::ids::ResourceId, String> {
    let id = crate::ids::ResourceId::parse(uri).map_err(|e| format!("resource: {e}"))?;
    if id.scheme != AUTOMATION_SCHEME {
        return Err(format!("resource must be an {AUTOMATION_SCHEME}:/<id> URI, not {}", crate::ids::printable(uri)));
    }
    Ok(id)
}

/// The session a definition is pinned to (`_meta["ahpd.session"]`).
pub fn pinned_session(definition: &AutomationDefinition) -> Option<&str> {
    definition.meta.as_ref()?.get(PIN_META_KEY)?.as_str()
}

/// What a definition is checked against besides itself.
pub struct Known<'a> {
    /// The providers configured.
    pub providers: &'a [String],
    /// Whether `uri` names a session a run may be pinned to (exists, is
    /// this host's own, is not being disposed).
    pub session: &'a dyn Fn(&str) -> bool,
}

/// Checks a whole definition (at create, and after an update's patch);
/// the error names the field, for the rejection a client reads.
pub fn check_definition(d: &AutomationDefinition, known: &Known<'_>) -> Result<(), String> {
    if d.title.trim().is_empty() {
        return Err("definition.title is empty".to_owned());
    }
    if d.title.len() > MAX_NAME_BYTES {
        return Err(format!("definition.title is longer than {MAX_NAME_BYTES} bytes"));
    }
    if d.message.origin.kind != MessageKind::Automation {
        return Err("definition.message.origin.kind must be \"automation\"".to_owned());
    }
    if d.message.text.trim().is_empty() {
        return Err("definition.message.text is empty".to_owned());
    }
    if d.message.text.len() > MAX_MESSAGE_BYTES {
        return Err(format!("definition.message.text is longer than {MAX_MESSAGE_BYTES} bytes"));
    }
    if d.message.attachments.as_ref().is_some_and(|a| !a.is_empty()) {
        return Err("definition.message.attachments are not supported by this host".to_owned());
    }
    let s = &d.session;
    if let Some(p) = &s.provider {
        if !known.providers.iter().any(|k| k == p) {
            return Err(format!("definition.session.provider: no agent with provider {}", crate::ids::printable(p)));
        }
    } else if known.providers.is_empty() {
        return Err("definition.session.provider: no agent is configured".to_owned());
    }
    if s.model.is_some() {
        return Err("definition.session.model is not supported by this host".to_owned());
    }
    if s.agent.is_some() {
        return Err("definition.session.agent is not supported by this host".to_owned());
    }
    if s.customizations.is_some() {
        return Err("definition.session.customizations are not supported by this host (automations.customizations is not advertised)".to_owned());
    }
    for (i, dir) in s.working_directories.iter().flatten().enumerate() {
        if crate::git::path_of_uri(dir).is_none() {
            return Err(format!("definition.session.workingDirectories[{i}] is not a file:// URI of an absolute path"));
        }
    }
    if d.triggers.len() > MAX_TRIGGERS {
        return Err(format!("definition.triggers holds more than {MAX_TRIGGERS} triggers"));
    }
    let mut ids = BTreeSet::new();
    for (i, t) in d.triggers.iter().enumerate() {
        match t {
            AutomationTrigger::Schedule(s) => {
                if s.id.is_empty() || s.id.len() > MAX_NAME_BYTES {
                    return Err(format!("definition.triggers[{i}].id must be 1 to {MAX_NAME_BYTES} bytes"));
                }
                if !ids.insert(s.id.as_str()) {
                    return Err(format!("definition.triggers[{i}].id {} is used twice", crate::ids::printable(&s.id)));
                }
                if let Some(AutomationMisfirePolicy::Unknown(p)) = &s.misfire_policy {
                    return Err(format!("definition.triggers[{i}].misfirePolicy {} is not skip or runOnce", crate::ids::printable(p)));
                }
                let schedule = cron::Schedule::parse(&s.schedule.expression, &s.schedule.time_zone).map_err(|e| format!("definition.triggers[{i}].schedule: {e}"))?;
                if schedule.next_after(0).is_none() {
                    return Err(format!("definition.triggers[{i}].schedule.expression never occurs"));
                }
            }
            AutomationTrigger::Event(_) => {
                return Err(format!("definition.triggers[{i}]: this host has no event trigger types (listAutomationTriggerDefinitions lists none)"));
            }
        }
    }
    let mut kinds = BTreeSet::new();
    for (i, c) in d.disable_conditions.iter().flatten().enumerate() {
        let kind = match c {
            AutomationDisableCondition::AfterRuns(r) => {
                if r.max < 1 {
                    return Err(format!("definition.disableConditions[{i}].max must be a positive integer"));
                }
                "afterRuns"
            }
            AutomationDisableCondition::AfterDate(a) => {
                if WallTime::parse_iso(&a.date).is_none() {
                    return Err(format!("definition.disableConditions[{i}].date is not an ISO 8601 timestamp"));
                }
                "afterDate"
            }
        };
        if !kinds.insert(kind) {
            return Err(format!("definition.disableConditions holds {kind} twice"));
        }
    }
    if let Some(meta) = &d.meta {
        if let Some(pin) = meta.get(PIN_META_KEY) {
            let Some(uri) = pin.as_str() else {
                return Err(format!("definition._meta[\"{PIN_META_KEY}\"] must be a session URI"));
            };
            if !(known.session)(uri) {
                return Err(format!("definition._meta[\"{PIN_META_KEY}\"]: no session {} on this host to pin to", crate::ids::printable(uri)));
            }
        }
    }
    Ok(())
}

/// The `afterRuns` cap of a definition, if it has one.
pub fn after_runs(d: &AutomationDefinition) -> Option<i64> {
    d.disable_conditions.iter().flatten().find_map(|c| match c {
        AutomationDisableCondition::AfterRuns(r) => Some(r.max),
        AutomationDisableCondition::AfterDate(_) => None,
    })
}

/// The `afterDate` of a definition, if it has one.
pub fn after_date(d: &AutomationDefinition) -> Option<WallTime> {
    d.disable_conditions.iter().flatten().find_map(|c| match c {
        AutomationDisableCondition::AfterDate(a) => WallTime::parse_iso(&a.date),
        AutomationDisableCondition::AfterRuns(_) => None,
    })
}

/// Each schedule trigger of `d`: (id, expression, time zone, misfire policy).
pub fn schedules(d: &AutomationDefinition) -> impl Iterator<Item = &ahp_types::state::AutomationScheduleTrigger> + '_ {
    d.triggers.iter().filter_map(|t| match t {
        AutomationTrigger::Schedule(s) => Some(s),
        AutomationTrigger::Event(_) => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_is_read_back_and_anything_else_refused() {
        assert_eq!(parse_runs_cursor(&runs_cursor(10)), Some(10));
        for bad in ["", "runs:", "runs:-1", "runs:1e3", "runs:99999", "runs:101", "x:1", "runs: 1"] {
            assert_eq!(parse_runs_cursor(bad), None, "{bad}");
        }
    }
}
