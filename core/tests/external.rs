//! External sessions and rediscovery (Sessions page, "Finding one", and the
//! `--sessions memory` paragraph of "The life of a session").

use ahpd_core::{Config, Effect, Outcome, ScannedRow, WallTime};
use ahpd_core::testkit::Harness;
use serde_json::{json, Value};

const DAY: i64 = 24 * 60 * 60 * 1000;

fn config() -> Config {
    Config { external_sources: vec!["claude".into()], residency_limit: 0, sleep_after_ms: 0, ..Config::default() }
}

/// Answers the pending scan of `provider` with `rows`.
fn answer_scan(h: &mut Harness, provider: &str, rows: Vec<ScannedRow>) {
    let pos = h
        .pending
        .iter()
        .position(|e| matches!(e, Effect::Scan { provider: p, .. } if p == provider))
        .unwrap_or_else(|| panic!("no scan of {provider} pending"));
    let Effect::Scan { op, .. } = h.pending.remove(pos) else { unreachable!() };
    h.done(op, Outcome::Scanned { rows, damaged: Vec::new() });
}

fn external(id: &str, modified: i64) -> ScannedRow {
    ScannedRow {
        conversation_id: id.into(),
        session: None,
        chat: None,
        title: format!("claude {id}"),
        working_directory: Some("file:///w/a_b".into()),
        created_at: WallTime(modified - 1000),
        modified_at: WallTime(modified),
    }
}

fn set_mode(h: &mut Harness, mode: &str) {
    h.dispatch(1, "ahp-root://", 1, json!({"type": "root/configChanged", "config": {"showExternalSessions": mode}}));
}

fn notifications(frames: &[Value], method: &str) -> Vec<String> {
    frames
        .iter()
        .filter(|f| f["method"] == method)
        .map(|f| f["params"]["summary"]["resource"].as_str().or(f["params"]["session"].as_str()).unwrap_or("").to_owned())
        .collect()
}

#[test]
fn external_sessions_follow_the_mode_and_every_client_is_told() {
    let mut h = Harness::new(config());
    h.connect(1, "c1");
    let now = h.now.wall.0;
    answer_scan(&mut h, "echo", vec![]);
    answer_scan(&mut h, "claude", vec![external("e1", now - DAY / 2), external("e2", now - 3 * DAY), external("e3", now - 20 * DAY)]);
    assert!(h.list(1).is_empty(), "none: the default shows no external session");
    h.frames(1);
    set_mode(&mut h, "last7Days");
    let frames = h.frames(1);
    let mut added = notifications(&frames, "root/sessionAdded");
    added.sort();
    assert_eq!(added, ["claude:/e1", "claude:/e2"]);
    let rows = h.list(1);
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r["_meta"]["vscode.external"] == true));
    set_mode(&mut h, "last24Hours");
    let frames = h.frames(1);
    assert_eq!(notifications(&frames, "root/sessionRemoved"), ["claude:/e2"]);
    set_mode(&mut h, "everything");
    let frames = h.frames(1);
    assert!(frames.iter().any(|f| f["params"]["rejectionReason"].is_string()), "an unknown mode is refused");
    assert_eq!(h.list(1).len(), 1);
}

#[test]
fn a_person_turn_adopts_an_external_session() {
    // An agent that resumes claude conversations lets a turn adopt one;
    // opening it alone keeps it external.
    let mut cfg = config();
    cfg.agents.push(ahpd_core::AgentSpec { provider: "claude".into(), ..ahpd_core::AgentSpec::echo() });
    let mut h = Harness::new(cfg);
    h.connect(1, "c1");
    let now = h.now.wall.0;
    answer_scan(&mut h, "echo", vec![]);
    answer_scan(&mut h, "claude", vec![external("e1", now - DAY)]);
    h.frames(1);
    let chat = "ahp-chat:/claude@e1";
    let rid = h.send_request(1, "subscribe", json!({"channel": chat}));
    h.settle();
    assert!(h.take_reply(1, rid).expect("reply")["result"]["snapshot"].is_object());
    assert!(h.list(1).is_empty(), "opened but still external under none");
    // Its state carries the mark its row does, from the first snapshot on.
    let sid = h.send_request(1, "subscribe", json!({"channel": "claude:/e1"}));
    h.settle();
    let snapshot = h.take_reply(1, sid).expect("reply")["result"]["snapshot"]["state"].clone();
    assert_eq!(snapshot["_meta"]["vscode.external"], true, "the state is marked external: {snapshot}");
    h.start_turn(1, chat, 1, "t1", "take over");
    h.settle();
    let frames = h.frames(1);
    assert_eq!(notifications(&frames, "root/sessionAdded"), ["claude:/e1"]);
    let rows = h.list(1);
    assert_eq!(rows.len(), 1);
    assert!(rows[0]["_meta"].is_null(), "the mark went: {}", rows[0]);
    // And from its state: a fresh snapshot no longer carries it.
    let sid = h.send_request(1, "subscribe", json!({"channel": "claude:/e1"}));
    h.settle();
    let snapshot = h.take_reply(1, sid).expect("reply")["result"]["snapshot"]["state"].clone();
    assert_ne!(snapshot["_meta"]["vscode.external"], true, "the state's mark went too: {snapshot}");
}

#[test]
fn a_conversation_whose_record_was_lost_comes_back_unread_and_unarchived() {
    let mut h = Harness::new(config());
    h.connect(1, "c1");
    let now = h.now.wall.0;
    answer_scan(&mut h, "echo", vec![own_row("mine", "ahp-chat:/ahp-session@mine", "ahp-session@mine", now - 1000)]);
    let rows = h.list(1);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["resource"], "ahp-session:/mine");
    assert_eq!(rows[0]["status"].as_u64().unwrap_or(0) & 96, 0, "unread, unarchived");
    assert!(rows[0]["_meta"].is_null(), "this host's own, not external");
    let cmds = h.store_ops();
    assert!(!cmds.is_empty(), "its record is written back");
}

#[test]
fn the_recent_mode_shows_the_two_newest_not_older_than_the_second_own_update() {
    let mut h = Harness::new(config());
    h.connect(1, "c1");
    let now = h.now.wall.0;
    answer_scan(&mut h, "echo", vec![]);
    answer_scan(&mut h, "claude", vec![external("a", now - 3 * DAY), external("b", now - 2 * DAY), external("c", now - DAY)]);
    set_mode(&mut h, "recent");
    let mut uris: Vec<String> = h.list(1).iter().map(|r| r["resource"].as_str().unwrap_or("").to_owned()).collect();
    uris.sort();
    assert_eq!(uris, ["claude:/b", "claude:/c"]);
}

#[test]
fn a_vanished_external_transcript_goes_and_hostile_ids_are_skipped() {
    let mut h = Harness::new(Config { scan_interval_ms: 0, ..config() });
    h.connect(1, "c1");
    let now = h.now.wall.0;
    answer_scan(&mut h, "echo", vec![]);
    answer_scan(&mut h, "claude", vec![external("keep", now), external("gone", now), external("../x", now)]);
    set_mode(&mut h, "last30Days");
    assert_eq!(h.list(1).len(), 2, "the hostile id is never listed");
    h.frames(1);
    // The listing started a refresh behind its answer.
    answer_scan(&mut h, "echo", vec![]);
    answer_scan(&mut h, "claude", vec![external("keep", now)]);
    let frames = h.frames(1);
    assert_eq!(notifications(&frames, "root/sessionRemoved"), ["claude:/gone"]);
}


fn own_row(session: &str, chat: &str, conversation: &str, modified: i64) -> ScannedRow {
    ScannedRow {
        conversation_id: conversation.into(),
        session: Some(format!("ahp-session:/{session}")),
        chat: Some(chat.into()),
        title: format!("title of {conversation}"),
        working_directory: None,
        created_at: WallTime(modified - 5000),
        modified_at: WallTime(modified),
    }
}

#[test]
fn every_chat_of_a_lost_session_comes_back_whatever_order_the_scan_found_them() {
    let mut h = Harness::new(config());
    h.connect(1, "c1");
    let now = h.now.wall.0;
    // The side chat's transcript is listed before the default chat's.
    let side = own_row("multi", "ahp-chat:/side-1", "conv-side", now - 500);
    let default = own_row("multi", "ahp-chat:/ahp-session@multi", "ahp-session@multi", now - 1000);
    answer_scan(&mut h, "echo", vec![side, default]);
    let rows = h.list(1);
    assert_eq!(rows.len(), 1, "one session, not one per chat: {rows:?}");
    assert_eq!(rows[0]["resource"], "ahp-session:/multi");
    assert_eq!(rows[0]["title"], "title of ahp-session@multi", "the default chat names the session");
    assert_eq!(rows[0]["defaultChat"], "ahp-chat:/ahp-session@multi");
    let chats: Vec<&str> = rows[0]["chats"].as_array().expect("chats").iter().filter_map(|c| c["resource"].as_str()).collect();
    assert!(chats.contains(&"ahp-chat:/ahp-session@multi") && chats.contains(&"ahp-chat:/side-1"), "{chats:?}");
    // The side chat is a chat of the session: subscribing to it wakes the
    // session and resumes both conversations.
    let rid = h.send_request(1, "subscribe", json!({"channel": "ahp-chat:/side-1"}));
    let cmds = h.settle();
    let resumed: Vec<String> = cmds
        .iter()
        .filter_map(|(_, c)| match c {
            ahpd_core::BackendCmd::Start { conversation_id, resume: true, .. } => Some(conversation_id.clone()),
            _ => None,
        })
        .collect();
    assert!(resumed.contains(&"conv-side".to_owned()) && resumed.contains(&"ahp-session@multi".to_owned()), "{resumed:?}");
    assert!(h.take_reply(1, rid).expect("reply")["result"]["snapshot"].is_object());
}

#[test]
fn a_scan_answering_after_a_dispose_does_not_bring_the_session_back() {
    let mut h = Harness::new(config());
    h.connect(1, "c1");
    answer_scan(&mut h, "echo", vec![]);
    answer_scan(&mut h, "claude", vec![]);
    let (uri, chat) = h.create(1, "gone");
    h.start_turn(1, &chat, 1, "t1", "hello");
    h.agent_reply(&chat, "t1", "hi");
    // A listing long after the first pass starts another scan; the session
    // is disposed while that scan is still out.
    h.advance(10 * 60 * 1000);
    h.list(1);
    let rid = h.send_request(1, "disposeSession", json!({"channel": uri}));
    h.settle();
    assert!(h.take_reply(1, rid).expect("dispose reply")["error"].is_null());
    let now = h.now.wall.0;
    answer_scan(&mut h, "echo", vec![own_row("gone", &chat, "ahp-session@gone", now - 1000)]);
    assert!(h.list(1).is_empty(), "the disposed session stays gone");
}

/// The config a session reports changes only when the host says so: a
/// session read back from its backend's own list (its record lost) has no
/// offer, and its first send writing git facts does not make one appear
/// under its subscribers (the sim found this, seed 1902 of 0835691's sim).
/// A restart reads one from those facts.
#[test]
fn a_rediscovered_session_reports_the_same_config_before_and_after_its_first_send() {
    let mut h = Harness::new(config());
    h.connect(1, "c1");
    let now = h.now.wall.0;
    let row = own_row("mine", "ahp-chat:/ahp-session@mine", "ahp-session@mine", now - 1000);
    answer_scan(&mut h, "echo", vec![ScannedRow { working_directory: Some("file:///w/repo".into()), ..row }]);
    let sid = h.send_request(1, "subscribe", json!({"channel": "ahp-session:/mine"}));
    h.settle_no_repo();
    let before = h.take_reply(1, sid).expect("subscribed")["result"]["snapshot"]["state"]["config"].clone();
    assert_eq!(before, Value::Null, "no offer was ever made to it");
    h.start_turn(1, "ahp-chat:/ahp-session@mine", 1, "t1", "hello");
    h.settle_no_repo();
    assert!(h.host.view().sessions.get("ahp-session:/mine").is_some_and(|s| s.record().git.is_some()), "the send asked git");
    h.connect(2, "c2");
    let after = h.request(2, "subscribe", json!({"channel": "ahp-session:/mine"}));
    assert_eq!(after["result"]["snapshot"]["state"]["config"], before, "{after}");
    // Read back after a restart, the git facts give it one.
    let records: Vec<_> = h.host.view().sessions.values().map(|s| s.record().clone()).collect();
    let mut h = Harness::with_records(config(), records);
    h.connect(1, "c1");
    let sid = h.send_request(1, "subscribe", json!({"channel": "ahp-session:/mine"}));
    h.settle_no_repo();
    let reply = h.take_reply(1, sid).expect("subscribed");
    assert_eq!(reply["result"]["snapshot"]["state"]["config"]["values"], json!({"isolation": "folder"}), "{reply}");
}

/// Answers store and backend commands until none is pending, keeping the
/// store's records in `store` as a disk would.
fn settle_into(h: &mut Harness, store: &mut std::collections::BTreeMap<String, ahpd_core::SessionRecord>) {
    loop {
        let ops = h.store_ops();
        let backend = h.settle_backend();
        if ops.is_empty() && backend.is_empty() {
            return;
        }
        for (op, command) in ops {
            match command {
                ahpd_core::StoreCmd::Put { record, .. } => {
                    store.insert(record.key().into_owned(), *record);
                }
                ahpd_core::StoreCmd::Delete { key } => {
                    store.remove(&key);
                }
                ahpd_core::StoreCmd::PutAutomation { .. } | ahpd_core::StoreCmd::DeleteAutomation { .. } => {}
            }
            h.done(op, Outcome::Ok);
        }
    }
}

/// "disposeSession ... drops the row": a disposed session whose backend's
/// copy outlives the dispose (a transcript its CLI keeps, an echo
/// conversation put back from a backup) is not listed again after a
/// restart. Its record becomes a tombstone, which the first pass that no
/// longer finds the copy removes. Before tombstones, the restart's scan
/// listed both sessions again.
#[test]
fn a_disposed_session_stays_disposed_across_restarts_while_its_backends_copy_lasts() {
    let mut store = std::collections::BTreeMap::new();
    let mut h = Harness::new(config());
    h.connect(1, "c1");
    answer_scan(&mut h, "echo", vec![]);
    let now = h.now.wall.0;
    answer_scan(&mut h, "claude", vec![external("e1", now - DAY)]);
    set_mode(&mut h, "last30Days");
    let (uri, chat) = h.create(1, "gone");
    h.start_turn(1, &chat, 1, "t1", "hello");
    h.agent_reply(&chat, "t1", "hi");
    settle_into(&mut h, &mut store);
    assert_eq!(h.list(1).len(), 2, "the host's own session and the external one");
    for channel in [uri.as_str(), "claude:/e1"] {
        let rid = h.send_request(1, "disposeSession", json!({"channel": channel}));
        settle_into(&mut h, &mut store);
        assert!(h.take_reply(1, rid).expect("dispose reply")["error"].is_null(), "{channel}");
    }
    assert!(h.list(1).is_empty());
    let tombstone = store.get("ahp-session@gone").expect("a tombstone in the store");
    assert!(tombstone.deleted && tombstone.title.is_empty() && tombstone.chats[0].senders.is_empty(), "{tombstone:?}");
    assert!(store.get("claude@e1").is_some_and(|r| r.deleted), "the external session's tombstone");

    // The restart: both backend copies are still there.
    let records: Vec<_> = store.values().cloned().collect();
    let mut h = Harness::with_records(config(), records);
    h.connect(1, "c1");
    let now = h.now.wall.0;
    answer_scan(&mut h, "echo", vec![own_row("gone", &chat, "ahp-session@gone", now - 1000)]);
    answer_scan(&mut h, "claude", vec![external("e1", now - DAY)]);
    set_mode(&mut h, "last30Days");
    settle_into(&mut h, &mut store);
    assert!(h.list(1).is_empty(), "neither comes back");
    assert!(store.values().all(|r| r.deleted), "both tombstones kept while the copies last");

    // The echo conversation's copy is gone: the next pass drops its
    // tombstone; the claude transcript is still there, so its stays.
    h.advance(10 * 60 * 1000);
    h.list(1);
    answer_scan(&mut h, "echo", vec![]);
    answer_scan(&mut h, "claude", vec![external("e1", now - DAY)]);
    settle_into(&mut h, &mut store);
    assert!(!store.contains_key("ahp-session@gone"), "the spent tombstone is removed");
    assert!(store.contains_key("claude@e1"));
    assert!(h.list(1).is_empty());

    // A session made anew under the disposed URI is a new session.
    let (again, chat) = h.create(1, "gone");
    h.start_turn(1, &chat, 2, "t2", "hello again");
    h.agent_reply(&chat, "t2", "hi");
    settle_into(&mut h, &mut store);
    assert_eq!(again, uri);
    // (The harness answered that session's writes itself.)
    let rows = h.list(1);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["resource"], uri.as_str());
}

/// A host with two agents, `echo` and `other`, whose first passes over
/// their transcripts found nothing; connection 1 is open.
fn echo_and_other() -> (Config, Harness) {
    let config = Config {
        agents: vec![ahpd_core::AgentSpec::echo(), ahpd_core::AgentSpec { provider: "other".into(), ..ahpd_core::AgentSpec::echo() }],
        residency_limit: 0,
        sleep_after_ms: 0,
        ..Config::default()
    };
    let mut h = Harness::new(config.clone());
    h.connect(1, "c1");
    answer_scan(&mut h, "echo", vec![]);
    answer_scan(&mut h, "other", vec![]);
    (config, h)
}

/// A URI made again under another agent and disposed again: the copy the
/// first agent kept stays hidden until no agent's pass finds one, across
/// restarts (issue 19, sim seed 2347: the second agent's pass spent the
/// tombstone, and the next restart listed the first one's copy again).
#[test]
fn a_uri_disposed_under_two_agents_stays_disposed_while_either_keeps_a_copy() {
    let (config, mut h) = echo_and_other();
    let mut store = std::collections::BTreeMap::new();
    let uri = "ahp-session:/twice";
    let chat = "ahp-chat:/ahp-session@twice";
    for (seq, provider) in [(1, "other"), (2, "echo")] {
        let rid = h.send_request(1, "createSession", json!({"channel": uri, "provider": provider}));
        settle_into(&mut h, &mut store);
        assert!(h.take_reply(1, rid).expect("create reply")["error"].is_null());
        h.start_turn(1, chat, seq, &format!("t{seq}"), "hello");
        h.agent_reply(chat, &format!("t{seq}"), "hi");
        settle_into(&mut h, &mut store);
        let rid = h.send_request(1, "disposeSession", json!({"channel": uri}));
        settle_into(&mut h, &mut store);
        assert!(h.take_reply(1, rid).expect("dispose reply")["error"].is_null());
    }
    // The next pass: the first agent kept its copy, the second did not
    // (the second answers last).
    h.advance(10 * 60 * 1000);
    h.list(1);
    let now = h.now.wall.0;
    answer_scan(&mut h, "other", vec![own_row("twice", chat, "ahp-session@twice", now - 1000)]);
    answer_scan(&mut h, "echo", vec![]);
    settle_into(&mut h, &mut store);
    assert!(h.list(1).is_empty());
    assert!(store.get("ahp-session@twice").is_some_and(|r| r.deleted), "the tombstone is kept: {store:?}");

    // After a restart, whatever order the passes answer in.
    let mut h = Harness::with_records(config, store.values().cloned().collect());
    h.connect(1, "c1");
    let now = h.now.wall.0;
    answer_scan(&mut h, "echo", vec![]);
    answer_scan(&mut h, "other", vec![own_row("twice", chat, "ahp-session@twice", now - 1000)]);
    settle_into(&mut h, &mut store);
    assert!(h.list(1).is_empty(), "the disposed session does not come back");
    assert!(store.get("ahp-session@twice").is_some_and(|r| r.deleted));
    // Once no agent finds a copy, the tombstone goes.
    h.advance(10 * 60 * 1000);
    h.list(1);
    answer_scan(&mut h, "echo", vec![]);
    answer_scan(&mut h, "other", vec![]);
    settle_into(&mut h, &mut store);
    assert!(!store.contains_key("ahp-session@twice"), "the spent tombstone is removed");
}

/// Only a pass asked after a dispose speaks for its tombstone (issue 19,
/// sim seed 11188): passes asked while the session was live (one answered
/// before the dispose, one after it) found nothing to hide, the tombstone
/// was spent though the agent kept its copy, and the next restart listed
/// the disposed session again.
#[test]
fn a_pass_asked_before_a_dispose_does_not_spend_its_tombstone() {
    let (config, mut h) = echo_and_other();
    let mut store = std::collections::BTreeMap::new();
    let uri = "ahp-session:/kept";
    let chat = "ahp-chat:/ahp-session@kept";
    let rid = h.send_request(1, "createSession", json!({"channel": uri, "provider": "echo"}));
    settle_into(&mut h, &mut store);
    assert!(h.take_reply(1, rid).expect("create reply")["error"].is_null());
    h.start_turn(1, chat, 1, "t1", "hello");
    h.agent_reply(chat, "t1", "hi");
    settle_into(&mut h, &mut store);
    // A pass over both agents is asked while the session lives; echo's
    // answers at once (its own conversation: nothing to hide).
    h.advance(10 * 60 * 1000);
    h.list(1);
    let now = h.now.wall.0;
    answer_scan(&mut h, "echo", vec![own_row("kept", chat, "ahp-session@kept", now - 1000)]);
    // Disposed; echo keeps a copy. The other agent's pass, asked before
    // the dispose, answers after it.
    let rid = h.send_request(1, "disposeSession", json!({"channel": uri}));
    settle_into(&mut h, &mut store);
    assert!(h.take_reply(1, rid).expect("dispose reply")["error"].is_null());
    answer_scan(&mut h, "other", vec![]);
    settle_into(&mut h, &mut store);
    assert!(store.get("ahp-session@kept").is_some_and(|r| r.deleted), "the tombstone is kept: {store:?}");
    // A restart: echo's copy stays hidden.
    let mut h = Harness::with_records(config, store.values().cloned().collect());
    h.connect(1, "c1");
    let now = h.now.wall.0;
    answer_scan(&mut h, "echo", vec![own_row("kept", chat, "ahp-session@kept", now - 1000)]);
    answer_scan(&mut h, "other", vec![]);
    settle_into(&mut h, &mut store);
    assert!(h.list(1).is_empty(), "the disposed session does not come back");
}

/// The URIs of the sessions the host holds.
fn held_uris(h: &Harness) -> Vec<String> {
    h.host.view().sessions.iter().map(|(u, _)| u.clone()).collect()
}

/// Issue 21: a pass is merged a slice an input (`scan_merge_slice` rows,
/// then as many sessions walked for external ones whose transcript went),
/// and each row is judged against the host as it is when its slice runs: a
/// session disposed between two slices stays disposed, and one that went
/// from the transcripts goes only once every row was merged.
#[test]
fn a_pass_merged_in_slices_judges_each_row_against_the_host_as_it_is_then() {
    let mut h = Harness::new(Config { scan_merge_slice: 1, scan_interval_ms: 0, ..config() });
    h.connect(1, "c1");
    set_mode(&mut h, "last30Days");
    let now = h.now.wall.0;
    answer_scan(&mut h, "echo", vec![]);
    answer_scan(&mut h, "claude", vec![external("a", now), external("b", now), external("gone", now)]);
    assert_eq!(held_uris(&h), ["claude:/a"], "one row in the input that brought the pass");
    assert!(h.host.next_deadline().is_some_and(|d| d.0 == h.now.mono.0 + 1), "the next slice a millisecond later");
    h.advance(1);
    assert_eq!(held_uris(&h), ["claude:/a", "claude:/b"]);
    for _ in 0..10 {
        h.advance(1);
    }
    assert_eq!(held_uris(&h), ["claude:/a", "claude:/b", "claude:/gone"]);
    assert!(h.host.next_deadline().is_none(), "merged: nothing left to do");
    h.frames(1);

    // The next pass (a listing starts it): `a` is disposed between its
    // slices, `gone`'s transcript went.
    h.list(1);
    answer_scan(&mut h, "echo", vec![]);
    answer_scan(&mut h, "claude", vec![external("b", now), external("a", now)]);
    let rid = h.send_request(1, "disposeSession", json!({"channel": "claude:/a"}));
    h.settle();
    assert!(h.take_reply(1, rid).expect("dispose reply")["error"].is_null());
    assert!(!held_uris(&h).contains(&"claude:/a".to_owned()));
    assert!(held_uris(&h).contains(&"claude:/gone".to_owned()), "nothing goes before every row was merged");
    for _ in 0..10 {
        h.advance(1);
    }
    assert_eq!(held_uris(&h), ["claude:/b"], "the disposed session stays disposed; the vanished one went");
    let frames = h.frames(1);
    assert!(notifications(&frames, "root/sessionRemoved").contains(&"claude:/gone".to_owned()));
    assert!(h.host.next_deadline().is_none());
}
