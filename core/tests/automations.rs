//! Automations (issue 24; AHP 1.0's automations channel; docs/DECISIONS.md
//! 25 and 26): the catalogue, definitions checked and kept, schedules fired
//! by the host's own deadline under clock jumps and restarts, runs in fresh
//! sessions and in a pinned one, run history, grants.

use std::collections::BTreeMap;

use ahpd_core::automation::AutomationRecord;
use ahpd_core::testkit::{users_directory, Harness, START_WALL_MS};
use ahpd_core::{BackendCmd, Config, Effect, MonoTime, Now, Outcome, SessionRecord, StoreCmd, WallTime};
use serde_json::{json, Value};

const CAT: &str = "ahp-automations://";

fn config(sleep_after_ms: u64) -> Config {
    Config { sleep_after_ms, residency_limit: 0, ..Config::default() }
}

/// A definition with one schedule trigger (`expr` in UTC, `misfire` if
/// given), enabled, running `text` in a fresh echo session.
fn definition(text: &str, expr: Option<&str>, misfire: Option<&str>) -> Value {
    let triggers = match expr {
        Some(e) => {
            let mut t = json!({"kind": "schedule", "id": "t1", "schedule": {"expression": e, "timeZone": "UTC"}});
            if let Some(m) = misfire {
                t["misfirePolicy"] = json!(m);
            }
            json!([t])
        }
        None => json!([]),
    };
    json!({
        "title": "nightly", "message": {"text": text, "origin": {"kind": "automation"}},
        "session": {"provider": "echo"}, "enabled": true, "triggers": triggers
    })
}

fn create(h: &mut Harness, conn: u64, id: &str, def: Value) {
    h.dispatch_next(conn, CAT, json!({"type": "automation/createRequested", "resource": format!("ahp-automation:/{id}"), "definition": def}));
}

/// The envelopes of `channel` among `frames`.
fn actions<'a>(frames: &'a [Value], channel: &str) -> Vec<&'a Value> {
    frames.iter().filter(|f| f["method"] == "action" && f["params"]["channel"] == channel).map(|f| &f["params"]).collect()
}

/// The last `automation/set` entry of `resource` among `frames`.
fn last_set(frames: &[Value], resource: &str) -> Option<Value> {
    actions(frames, CAT).into_iter().rev().find(|a| a["action"]["type"] == "automation/set" && a["action"]["automation"]["resource"] == resource).map(|a| a["action"]["automation"].clone())
}

/// Answers store writes, keeping automation records in `disk`.
fn durable_automations(h: &mut Harness, disk: &mut BTreeMap<String, AutomationRecord>, sessions: &mut BTreeMap<String, SessionRecord>) {
    loop {
        let ops = h.store_ops();
        if ops.is_empty() {
            return;
        }
        for (op, cmd) in ops {
            match cmd {
                StoreCmd::PutAutomation { record } => {
                    disk.insert(record.key().unwrap_or_default(), *record);
                }
                StoreCmd::DeleteAutomation { key } => {
                    disk.remove(&key);
                }
                StoreCmd::Put { record, .. } => {
                    sessions.insert(record.key().into_owned(), *record);
                }
                StoreCmd::Delete { key } => {
                    sessions.remove(&key);
                }
            }
            h.done(op, Outcome::Ok);
        }
    }
}

fn record(h: &Harness, id: &str) -> AutomationRecord {
    let uri = format!("ahp-automation:/{id}");
    h.host.view().automations().find(|a| a.resource == uri).cloned().unwrap_or_else(|| panic!("no automation {uri}"))
}

/// The turns handed to agents among `cmds`: (chat, turn id, text).
fn sends(cmds: &[(String, BackendCmd)]) -> Vec<(String, String, String)> {
    cmds.iter()
        .filter_map(|(chat, c)| match c {
            BackendCmd::Send { turn_id, message, .. } => Some((chat.clone(), turn_id.clone(), message.text.clone())),
            _ => None,
        })
        .collect()
}

/// Create, update (disable), remove: each echoed, the entry told as
/// `automation/set` with its next occurrence, the record written and then
/// deleted; the catalogue's snapshot holds what the host holds.
#[test]
fn an_automation_is_created_updated_and_removed_through_the_catalogue() {
    let mut h = Harness::new(config(0));
    h.connect(1, "c1");
    h.input(ahpd_core::Input::Connected { conn: ahpd_core::ConnId(2) });
    let init = h.request(2, "initialize", json!({"channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": "c9"}));
    assert!(init["result"]["automations"]["create"].is_object(), "create advertised: {init}");
    assert!(init["result"]["automations"]["schedules"].is_object());
    assert!(init["result"]["automations"].get("runCancellation").is_none(), "cancellation is not built");
    let snap = h.request(1, "subscribe", json!({"channel": CAT}));
    assert_eq!(snap["result"]["snapshot"]["state"]["entries"], json!([]), "{snap}");
    h.frames(1);
    create(&mut h, 1, "a", definition("hello", Some("*/5 * * * *"), None));
    let frames = h.frames(1);
    let cat = actions(&frames, CAT);
    assert_eq!(cat[0]["action"]["type"], "automation/createRequested", "echoed first: {frames:?}");
    assert!(cat[0].get("rejectionReason").is_none());
    let entry = last_set(&frames, "ahp-automation:/a").expect("automation/set");
    assert_eq!(entry["nextRunAt"], "2026-01-01T00:05:00.000Z", "{entry}");
    assert_eq!(entry["operations"], json!(["update", "remove", "run"]));
    let writes = h.store_ops();
    assert!(writes.iter().any(|(_, c)| matches!(c, StoreCmd::PutAutomation { record } if record.resource == "ahp-automation:/a")), "{writes:?}");
    h.dispatch_next(1, CAT, json!({"type": "automation/updateRequested", "resource": "ahp-automation:/a", "changes": {"enabled": false}}));
    let entry = last_set(&h.frames(1), "ahp-automation:/a").expect("automation/set");
    assert_eq!(entry["definition"]["enabled"], false);
    assert!(entry.get("nextRunAt").is_none(), "no occurrence while disabled: {entry}");
    assert!(h.host.view().automation_due_index().is_empty());
    let snap = h.request(1, "subscribe", json!({"channel": CAT}));
    assert_eq!(snap["result"]["snapshot"]["state"]["entries"][0]["definition"]["enabled"], false);
    h.frames(1);
    h.dispatch_next(1, CAT, json!({"type": "automation/removed", "resource": "ahp-automation:/a"}));
    let frames = h.frames(1);
    assert_eq!(actions(&frames, CAT)[0]["action"]["type"], "automation/removed");
    assert!(h.host.view().automations().next().is_none());
    let writes = h.store_ops();
    assert!(writes.iter().any(|(_, c)| matches!(c, StoreCmd::DeleteAutomation { key } if key == "ahp-automation@a")), "{writes:?}");
    // Removing what is not there is a no-op, echoed.
    h.dispatch_next(1, CAT, json!({"type": "automation/removed", "resource": "ahp-automation:/a"}));
    assert!(actions(&h.frames(1), CAT)[0].get("rejectionReason").is_none());
}

/// Every bad definition is rejected with a reason naming the field, and
/// nothing is kept or written.
#[test]
fn a_bad_definition_is_rejected_naming_the_field() {
    let mut h = Harness::new(config(0));
    h.connect(1, "c1");
    h.request(1, "subscribe", json!({"channel": CAT}));
    h.settle_store();
    h.frames(1);
    let mut user = definition("x", None, None);
    user["message"]["origin"]["kind"] = json!("user");
    let mut event = definition("x", None, None);
    event["triggers"] = json!([{"kind": "event", "id": "e", "type": "github", "title": "GitHub", "events": []}]);
    let mut twice = definition("x", Some("0 * * * *"), None);
    twice["triggers"] = json!([twice["triggers"][0].clone(), twice["triggers"][0].clone()]);
    let mut zone = definition("x", Some("0 * * * *"), None);
    zone["triggers"][0]["schedule"]["timeZone"] = json!("Mars/Base");
    let mut provider = definition("x", None, None);
    provider["session"]["provider"] = json!("nope");
    let mut pin = definition("x", None, None);
    pin["_meta"] = json!({"ahpd.session": "ahp-session:/missing"});
    for (resource, def, says) in [
        ("ahp-automation:/a", user, "definition.message.origin.kind"),
        ("ahp-automation:/a", definition("x", Some("0 0 * * * *"), None), "definition.triggers[0].schedule"),
        ("ahp-automation:/a", definition("x", Some("0 0 L * *"), None), "day of month"),
        ("ahp-automation:/a", zone, "timeZone"),
        ("ahp-automation:/a", event, "event trigger"),
        ("ahp-automation:/a", twice, "definition.triggers[1].id"),
        ("ahp-automation:/a", provider, "definition.session.provider"),
        ("ahp-automation:/a", pin, "ahpd.session"),
        ("ahp-session:/a", definition("x", None, None), "resource"),
        ("ahp-automation:/../x", definition("x", None, None), "resource"),
    ] {
        h.dispatch_next(1, CAT, json!({"type": "automation/createRequested", "resource": resource, "definition": def}));
        let frames = h.frames(1);
        let cat = actions(&frames, CAT);
        assert_eq!(cat.len(), 1, "only the rejection, to its sender: {frames:?}");
        let reason = cat[0]["rejectionReason"].as_str().unwrap_or_else(|| panic!("rejected: {frames:?}"));
        assert!(reason.contains(says), "{says}: {reason}");
    }
    assert!(h.host.view().automations().next().is_none());
    assert!(h.store_ops().is_empty(), "nothing written");
}

/// A due occurrence makes exactly one run: a fresh session (origin
/// automation) whose first turn is the definition's message; the run is
/// running, then completed with the turn; the next occurrence is indexed.
#[test]
fn a_schedule_fires_on_time_into_a_fresh_session_and_the_run_follows_its_turn() {
    let mut h = Harness::new(config(0));
    h.connect(1, "c1");
    h.request(1, "subscribe", json!({"channel": CAT}));
    create(&mut h, 1, "a", definition("summarize the day", Some("* * * * *"), None));
    h.settle_store();
    let due = h.host.next_deadline().expect("a deadline for the occurrence");
    assert_eq!(due, MonoTime(60_000), "the first minute");
    h.advance(59_999);
    assert!(record(&h, "a").runs.is_empty(), "not before it is due");
    h.advance(1);
    let r = record(&h, "a");
    assert_eq!(r.runs.len(), 1, "one run");
    assert_eq!(r.next.get("t1"), Some(&WallTime(START_WALL_MS + 120_000)), "the next one is indexed");
    let run = r.runs[0].resource.clone();
    assert_eq!(run, "ahp-automation-run:/a.1");
    let origin = serde_json::to_value(&r.runs[0].origin).unwrap_or_default();
    assert_eq!(origin, json!({"kind": "trigger", "triggerId": "t1", "scheduledFor": "2026-01-01T00:01:00.000Z"}));
    let cmds = h.settle();
    let turns = sends(&cmds);
    assert_eq!(turns.len(), 1, "{cmds:?}");
    let (chat, turn, text) = turns[0].clone();
    assert_eq!(text, "summarize the day");
    let session = r.runs[0].sessions.first().cloned().unwrap_or_else(|| record(&h, "a").runs[0].sessions[0].clone());
    let sub = h.request(1, "subscribe", json!({"channel": session}));
    assert_eq!(sub["result"]["snapshot"]["state"]["origin"], json!({"kind": "automation", "automation": "ahp-automation:/a", "run": run}), "{sub}");
    let run_state = h.request(1, "subscribe", json!({"channel": run}));
    assert_eq!(run_state["result"]["snapshot"]["state"]["lifecycle"]["status"], "running", "{run_state}");
    assert_eq!(run_state["result"]["snapshot"]["state"]["sessions"], json!([session]));
    h.frames(1);
    h.agent_reply(&chat, &turn, "done");
    let frames = h.frames(1);
    let run_actions = actions(&frames, &run);
    assert_eq!(run_actions.last().map(|a| a["action"]["lifecycle"]["status"].clone()), Some(json!("completed")), "{frames:?}");
    assert!(h.host.view().sessions.get(&session).is_some_and(|s| s.is_announced()), "the run's session is listed after its first turn");
    // The next minute makes the second run, not before.
    h.advance(59_999);
    assert_eq!(record(&h, "a").runs.len(), 1);
    h.advance(1);
    assert_eq!(record(&h, "a").runs.len(), 2);
}

/// A failed start of the run's session fails the run with the backend's
/// words; the session never existed.
#[test]
fn a_run_whose_session_cannot_start_fails_with_the_backends_error() {
    let mut h = Harness::new(config(0));
    h.connect(1, "c1");
    create(&mut h, 1, "a", definition("go", None, None));
    h.settle_store();
    let r = h.request(1, "runAutomation", json!({"channel": CAT, "automation": "ahp-automation:/a", "requestId": "r1"}));
    assert_eq!(r["result"]["resource"], "ahp-automation-run:/a.1", "{r}");
    let cmds = h.backend_cmds();
    let (op, _, _) = cmds.iter().find(|(_, _, c)| matches!(c, BackendCmd::Start { .. })).cloned().expect("a start");
    h.done(op, Outcome::Failed { message: "echo is broken".into() });
    let run = record(&h, "a").runs[0].clone();
    let lifecycle = serde_json::to_value(&run.lifecycle).unwrap_or_default();
    assert_eq!(lifecycle["status"], "failed");
    assert!(lifecycle["error"]["message"].as_str().is_some_and(|m| m.contains("echo is broken")), "{lifecycle}");
    assert!(h.host.view().sessions.get(&run.sessions[0]).is_none(), "no session left behind");
}

/// `runAutomation` runs a disabled automation; the same requestId answers
/// the same run; another makes another; an unknown automation is -32602.
#[test]
fn a_manual_run_is_independent_of_enabled_and_idempotent_by_request_id() {
    let mut h = Harness::new(config(0));
    h.connect(1, "c1");
    let mut def = definition("go", Some("0 0 1 1 *"), None);
    def["enabled"] = json!(false);
    create(&mut h, 1, "a", def);
    h.settle_store();
    let first = h.request(1, "runAutomation", json!({"channel": CAT, "automation": "ahp-automation:/a", "requestId": "r1"}));
    let again = h.request(1, "runAutomation", json!({"channel": CAT, "automation": "ahp-automation:/a", "requestId": "r1"}));
    assert_eq!(first["result"], again["result"], "the same run");
    let other = h.request(1, "runAutomation", json!({"channel": CAT, "automation": "ahp-automation:/a", "requestId": "r2"}));
    assert_ne!(other["result"], first["result"]);
    assert_eq!(record(&h, "a").runs.len(), 2);
    let origin = serde_json::to_value(&record(&h, "a").runs[0].origin).unwrap_or_default();
    assert_eq!(origin, json!({"kind": "manual"}));
    let unknown = h.request(1, "runAutomation", json!({"channel": CAT, "automation": "ahp-automation:/zz", "requestId": "r1"}));
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    let triggers = h.request(1, "listAutomationTriggerDefinitions", json!({"channel": CAT}));
    assert_eq!(triggers["result"], json!({"items": []}));
}

/// The wall clock jumping past several occurrences is a misfire: runOnce
/// (the default) makes one catch-up run for all of them, skip none; either
/// way the next occurrence is the first after now. Jumping back fires
/// nothing until the wall clock reaches the occurrence again.
#[test]
fn missed_occurrences_follow_the_misfire_policy_under_clock_jumps() {
    let mut h = Harness::new(config(0));
    h.connect(1, "c1");
    create(&mut h, 1, "once", definition("go", Some("*/10 * * * *"), None));
    create(&mut h, 1, "skip", definition("go", Some("*/10 * * * *"), Some("skip")));
    h.settle_store();
    // An hour passes in one jump of the wall clock.
    h.now.wall = WallTime(h.now.wall.0 + 3_600_000 + 30_000);
    h.advance(1);
    let once = record(&h, "once");
    assert_eq!(once.runs.len(), 1, "one catch-up run for six missed");
    let origin = serde_json::to_value(&once.runs[0].origin).unwrap_or_default();
    assert_eq!(origin["catchUp"], true);
    assert_eq!(origin["scheduledFor"], "2026-01-01T00:10:00.000Z", "the first it missed");
    assert!(record(&h, "skip").runs.is_empty(), "skip makes none");
    let after = WallTime(START_WALL_MS + 4_200_000);
    assert_eq!(once.next.get("t1"), Some(&after));
    assert_eq!(record(&h, "skip").next.get("t1"), Some(&after));
    // Back a day: nothing is due until the wall clock is at 01:10 again.
    h.now.wall = WallTime(h.now.wall.0 - 86_400_000);
    h.advance(600_000);
    assert_eq!(record(&h, "once").runs.len(), 1);
    assert_eq!(record(&h, "skip").runs.len(), 0);
    // A run on time is no catch-up.
    h.now.wall = after;
    h.advance(0);
    let origin = serde_json::to_value(&record(&h, "skip").runs[0].origin).unwrap_or_default();
    assert!(origin.get("catchUp").is_none(), "{origin}");
}

/// Automations survive a restart; an occurrence due while the daemon was
/// down is evaluated once at start (runOnce: one catch-up run), and a run
/// the stopped process left running failed with it.
#[test]
fn a_restart_keeps_automations_and_evaluates_what_it_missed_once() {
    let mut h = Harness::new(config(0));
    h.connect(1, "c1");
    create(&mut h, 1, "a", definition("go", Some("0 * * * *"), None));
    let (mut disk, mut sessions) = (BTreeMap::new(), BTreeMap::new());
    durable_automations(&mut h, &mut disk, &mut sessions);
    h.request(1, "runAutomation", json!({"channel": CAT, "automation": "ahp-automation:/a", "requestId": "r1"}));
    h.settle_backend();
    durable_automations(&mut h, &mut disk, &mut sessions);
    assert_eq!(disk.len(), 1);
    // Down for three hours.
    let later = Now { mono: MonoTime(0), wall: WallTime(START_WALL_MS + 3 * 3_600_000 + 5_000) };
    let mut h = Harness::with_records_at(config(0), sessions.values().cloned().collect(), later);
    h.host.restore_automations(disk.values().cloned());
    assert_eq!(h.host.view().automation_due_index().len(), 1, "indexed from the record");
    h.advance(0);
    let r = record(&h, "a");
    assert_eq!(r.runs.len(), 2, "the manual run and one catch-up");
    let interrupted = serde_json::to_value(&r.runs[1].lifecycle).unwrap_or_default();
    assert_eq!(interrupted["status"], "failed", "the run the stop interrupted failed: {interrupted}");
    let origin = serde_json::to_value(&r.runs[0].origin).unwrap_or_default();
    assert_eq!(origin["catchUp"], true);
    durable_automations(&mut h, &mut disk, &mut sessions);
    let mut again = Harness::with_records_at(config(0), sessions.values().cloned().collect(), later);
    again.host.restore_automations(disk.values().cloned());
    again.advance(10_000);
    assert_eq!(record(&again, "a").runs.len(), 2, "evaluated once across the restarts");
}

/// Run history: the entry shows the newest page of ended runs with a
/// cursor; `fetchAutomationRuns` adds the next page for every subscriber;
/// a cursor the host did not give is -32602.
#[test]
fn run_history_pages_through_fetch_automation_runs() {
    let mut h = Harness::new(config(0));
    h.connect(1, "c1");
    h.request(1, "subscribe", json!({"channel": CAT}));
    create(&mut h, 1, "a", definition("/fail", None, None));
    h.settle_store();
    for i in 0..12 {
        h.request(1, "runAutomation", json!({"channel": CAT, "automation": "ahp-automation:/a", "requestId": format!("r{i}")}));
        let start = h.backend_cmds();
        for (op, _, _) in start {
            h.done(op, Outcome::Failed { message: "no".into() });
        }
        h.settle_store();
    }
    let frames = h.frames(1);
    let entry = last_set(&frames, "ahp-automation:/a").expect("set");
    assert_eq!(entry["runs"].as_array().map(Vec::len), Some(10), "a page");
    assert_eq!(entry["runs"][0]["resource"], "ahp-automation-run:/a.12", "newest first");
    let cursor = entry["runsNextCursor"].as_str().expect("a cursor").to_owned();
    let r = h.request(1, "fetchAutomationRuns", json!({"channel": CAT, "automation": "ahp-automation:/a", "cursor": cursor}));
    assert_eq!(r["result"], json!({}), "{r}");
    let entry = last_set(&h.frames(1), "ahp-automation:/a").expect("set");
    assert_eq!(entry["runs"].as_array().map(Vec::len), Some(12));
    assert!(entry.get("runsNextCursor").is_none());
    for bad in ["runs:99999", "../../etc", "runs:-1", ""] {
        let r = h.request(1, "fetchAutomationRuns", json!({"channel": CAT, "automation": "ahp-automation:/a", "cursor": bad}));
        assert_eq!(r["error"]["code"], -32602, "{bad}: {r}");
    }
}

/// A pinned automation's run goes to its session: a sleeping one is woken
/// and the message is its turn; a wake that fails fails the run with the
/// backend's error and the session stays asleep.
#[test]
fn a_pinned_run_wakes_its_sleeping_session_and_a_failed_wake_fails_the_run() {
    let mut h = Harness::new(config(5_000));
    h.connect(1, "c1");
    let (uri, chat) = h.session_with_turn("s");
    let mut def = definition("check in", None, None);
    def["_meta"] = json!({"ahpd.session": uri});
    create(&mut h, 1, "p", def);
    h.settle_store();
    h.advance(6_000);
    assert_eq!(h.host.view().sessions.get(&uri).map(|s| s.phase().name()), Some("asleep"));
    h.request(1, "runAutomation", json!({"channel": CAT, "automation": "ahp-automation:/p", "requestId": "r1"}));
    let cmds = h.settle();
    assert!(cmds.iter().any(|(_, c)| matches!(c, BackendCmd::Start { resume: true, .. })), "woken: {cmds:?}");
    let turns = sends(&cmds);
    assert_eq!(turns.len(), 1, "{cmds:?}");
    assert_eq!((turns[0].0.as_str(), turns[0].2.as_str()), (chat.as_str(), "check in"));
    assert_eq!(record(&h, "p").runs[0].sessions, vec![uri.clone()]);
    h.agent_reply(&chat, &turns[0].1, "ok");
    assert_eq!(serde_json::to_value(&record(&h, "p").runs[0].lifecycle).unwrap_or_default()["status"], "completed");
    // Asleep again; this time the resume fails.
    h.advance(6_000);
    assert_eq!(h.host.view().sessions.get(&uri).map(|s| s.phase().name()), Some("asleep"));
    h.request(1, "runAutomation", json!({"channel": CAT, "automation": "ahp-automation:/p", "requestId": "r2"}));
    for (op, _, cmd) in h.backend_cmds() {
        let outcome = match cmd {
            BackendCmd::Start { .. } => Outcome::Failed { message: "resume refused".into() },
            _ => Outcome::Ok,
        };
        h.done(op, outcome);
    }
    h.settle_store();
    let run = serde_json::to_value(&record(&h, "p").runs[0].lifecycle).unwrap_or_default();
    assert_eq!(run["status"], "failed");
    assert!(run["error"]["message"].as_str().is_some_and(|m| m.contains("resume refused")), "{run}");
    assert_eq!(h.host.view().sessions.get(&uri).map(|s| s.phase().name()), Some("asleep"), "the session stays asleep");
    assert!(h.host.view().sessions.get(&uri).is_some_and(|s| s.record().chats[0].queued.is_empty()), "nothing left queued");
}

/// Disposing the pinned session removes its automations: told to the
/// catalogue and deleted from the store.
#[test]
fn disposing_the_pinned_session_removes_its_automations() {
    let mut h = Harness::new(config(0));
    h.connect(1, "c1");
    let (uri, _) = h.session_with_turn("s");
    h.request(1, "subscribe", json!({"channel": CAT}));
    let mut def = definition("check in", Some("0 * * * *"), None);
    def["_meta"] = json!({"ahpd.session": uri});
    create(&mut h, 1, "p", def);
    create(&mut h, 1, "free", definition("x", None, None));
    h.settle();
    h.frames(1);
    let id = h.send_request(1, "disposeSession", json!({"channel": uri}));
    h.settle();
    assert!(h.take_reply(1, id).is_some());
    let frames = h.frames(1);
    let removed: Vec<_> = actions(&frames, CAT).into_iter().filter(|a| a["action"]["type"] == "automation/removed").collect();
    assert_eq!(removed.len(), 1, "{frames:?}");
    assert_eq!(removed[0]["action"]["resource"], "ahp-automation:/p");
    let left: Vec<_> = h.host.view().automations().map(|a| a.resource.clone()).collect();
    assert_eq!(left, vec!["ahp-automation:/free".to_owned()]);
    assert!(h.host.view().automation_due_index().is_empty());
}

/// Grants: a guest may read the catalogue but not create; only the owner
/// (or an administrator) may change or run an automation.
#[test]
fn only_the_owner_changes_or_runs_an_automation() {
    let mut cfg = config(0);
    cfg.users = Some(users_directory(&[("alice", ahpd_core::grants::Role::Member), ("bob", ahpd_core::grants::Role::Member), ("gus", ahpd_core::grants::Role::Guest)]));
    let mut h = Harness::new(cfg);
    for (conn, who) in [(1, "alice"), (2, "bob"), (3, "gus")] {
        h.input(ahpd_core::Input::Connected { conn: ahpd_core::ConnId(conn) });
        let r = h.request(conn, "authenticate", json!({"channel": "ahp-root://", "resource": "ahpd", "token": format!("token-{who}")}));
        assert!(r.get("result").is_some(), "{r}");
        let r = h.request(conn, "initialize", json!({"channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": who}));
        assert!(r.get("result").is_some(), "{r}");
    }
    let snap = h.request(3, "subscribe", json!({"channel": CAT}));
    assert!(snap.get("result").is_some(), "a guest reads: {snap}");
    create(&mut h, 3, "g", definition("x", None, None));
    let frames = h.frames(3);
    assert!(actions(&frames, CAT).last().and_then(|a| a["rejectionReason"].as_str()).is_some_and(|r| r.contains("session:create")), "{frames:?}");
    create(&mut h, 1, "a", definition("x", None, None));
    h.settle_store();
    assert_eq!(record(&h, "a").owner.as_deref(), Some("user:alice"));
    h.dispatch_next(2, CAT, json!({"type": "automation/updateRequested", "resource": "ahp-automation:/a", "changes": {"title": "mine now"}}));
    let frames = h.frames(2);
    assert!(actions(&frames, CAT).last().and_then(|a| a["rejectionReason"].as_str()).is_some_and(|r| r.contains("owner")), "{frames:?}");
    let r = h.request(2, "runAutomation", json!({"channel": CAT, "automation": "ahp-automation:/a", "requestId": "r"}));
    assert_eq!(r["error"]["code"], -32009, "{r}");
    assert_eq!(record(&h, "a").definition.title, "nightly");
    let _ = h.take(|e| matches!(e, Effect::Log(_)).then_some(()));
}
