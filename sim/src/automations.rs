//! The simulated clients' moves on automations (issue 24; AHP 1.0's
//! automations channel): create, update, remove, manual runs (a request id
//! used again now and then) and run-history pages (a foreign cursor now and
//! then), with schedules that fire under the wall-clock jumps and host
//! crashes of the fault phase, and automations pinned to sessions that may
//! sleep, be disposed or not exist. The core's invariants check the rest
//! after every step (`inv_automation_index_consistent`,
//! `inv_due_automation_fired`, `inv_pinned_session_exists`,
//! `inv_one_run_per_occurrence`). Kept apart from the other moves
//! (`clients.rs`, arm 23).

use serde_json::{json, Value};

use ahp_types::Uri;

use crate::clients::{Client, ClientOut, ReqKind};
use crate::rng::SimRng;

const CAT: &str = "ahp-automations://";
const SCHEDULES: [&str; 5] = ["* * * * *", "*/2 * * * *", "*/5 * * * *", "0 * * * *", "30 9 * * MON-FRI"];

fn definition(rng: &mut SimRng, id: u64, session: &Uri) -> Value {
    let mut trigger = json!({"kind": "schedule", "id": "t", "schedule": {"expression": SCHEDULES[rng.below(SCHEDULES.len() as u64) as usize], "timeZone": if rng.chance(0.5) { "UTC" } else { "Europe/Berlin" }}});
    match rng.below(3) {
        0 => trigger["misfirePolicy"] = json!("skip"),
        1 => trigger["misfirePolicy"] = json!("runOnce"),
        _ => {}
    }
    let mut d = json!({
        "title": format!("auto {id}"),
        "message": {"text": format!("automation a{id}"), "origin": {"kind": "automation"}},
        "session": {"provider": "echo"},
        "enabled": rng.chance(0.8),
        "triggers": if rng.chance(0.85) { json!([trigger]) } else { json!([]) },
    });
    if rng.chance(0.2) {
        d["disableConditions"] = json!([{"kind": "afterRuns", "max": rng.range(1, 4)}]);
    }
    if rng.chance(0.4) {
        d["_meta"] = json!({"ahpd.session": session});
    }
    if rng.chance(0.05) {
        // Refused by name: not AHP's cron.
        d["triggers"] = json!([{"kind": "schedule", "id": "t", "schedule": {"expression": "0 0 L * *", "timeZone": "UTC"}}]);
    }
    d
}

/// One automation move of `client`, pinning to `session` now and then.
pub fn think(client: &mut Client, rng: &mut SimRng, session: &Uri) -> Vec<ClientOut> {
    let id = rng.below(4);
    let resource = format!("ahp-automation:/a{id}");
    match rng.weighted(&[4, 3, 1, 4, 1]) {
        0 => {
            let definition = definition(rng, id, session);
            vec![client.dispatch(CAT, json!({"type": "automation/createRequested", "resource": resource, "definition": definition}))]
        }
        1 => {
            let changes = match rng.below(3) {
                0 => json!({"enabled": rng.chance(0.6)}),
                1 => json!({"triggers": [{"kind": "schedule", "id": format!("t{}", rng.below(2)), "schedule": {"expression": SCHEDULES[rng.below(SCHEDULES.len() as u64) as usize], "timeZone": "UTC"}}]}),
                _ => json!({"title": format!("renamed {}", rng.below(10))}),
            };
            vec![client.dispatch(CAT, json!({"type": "automation/updateRequested", "resource": resource, "changes": changes}))]
        }
        2 => vec![client.dispatch(CAT, json!({"type": "automation/removed", "resource": resource}))],
        3 => {
            let request = format!("r{}", rng.below(6));
            vec![client.send_request("runAutomation", json!({"channel": CAT, "automation": resource, "requestId": request}), ReqKind::Plain)]
        }
        _ => {
            let cursor = match rng.below(3) {
                0 => Value::Null,
                1 => json!("runs:10"),
                _ => json!("../../etc"),
            };
            let mut params = json!({"channel": CAT, "automation": resource});
            if !cursor.is_null() {
                params["cursor"] = cursor;
            }
            vec![client.send_request("fetchAutomationRuns", params, ReqKind::Plain)]
        }
    }
}
