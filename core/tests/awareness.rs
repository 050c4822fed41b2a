//! Workspace awareness scenarios (issue 10): publishing, peers on `_meta`
//! (in short: their count, the latest events, warnings by kind; the records
//! by `ahpd/listPeers`), heartbeat noise, tiers deciding what a declared
//! write does, removal.

use ahp_types::actions::{ChatToolCallReadyAction, ChatToolCallStartAction, StateAction};
use ahp_types::common::StringOrMarkdown;
use ahp_types::state::ToolCallConfirmationReason;
use ahpd_core::awareness::{ActiveRecord, AwarenessConfig, ProcessObservation, RegistryFile, RECORD_VERSION};
use ahpd_core::{BackendCmd, BackendEvent, Config, Effect, Input, OpId, Outcome, RegistryCmd};
use ahpd_core::testkit::Harness;
use serde_json::{json, Value};

fn config() -> Config {
    Config {
        host_name: "h".to_owned(),
        // No gap between scans: each scenario steps scan by scan.
        awareness: AwarenessConfig { enabled: true, pid: 100, pid_start: 5, heartbeat_ms: 5_000, scan_gap_ms: 0 },
        ..Config::default()
    }
}

fn registry(h: &mut Harness) -> Vec<(OpId, RegistryCmd)> {
    h.take(|e| match e {
        Effect::Registry { op, command } => Some((*op, command.clone())),
        _ => None,
    })
}

fn peer(activity: &str, updated_at: i64) -> ActiveRecord {
    ActiveRecord {
        version: RECORD_VERSION,
        session: "ahp-session:/peer".to_owned(),
        host: "h".to_owned(),
        pid: 200,
        pid_start: 9,
        working_directories: vec!["/w".to_owned()],
        repository: None,
        branch: None,
        head: None,
        status: 8,
        activity: activity.to_owned(),
        claims: vec!["/w/src/a.ts".to_owned()],
        updated_at,
    }
}

/// Answers every registry command: publishes and removals Ok, scans with
/// `files` (the peer alive with its start time).
fn answer(h: &mut Harness, files: &[ActiveRecord]) -> Vec<RegistryCmd> {
    let mut seen = Vec::new();
    loop {
        let cmds = registry(h);
        if cmds.is_empty() {
            return seen;
        }
        for (op, cmd) in cmds {
            let outcome = match &cmd {
                RegistryCmd::Scan { .. } => Outcome::RegistryScanned {
                    files: files
                        .iter()
                        .map(|r| RegistryFile {
                            name: format!("{}-x.json", r.pid),
                            bytes: serde_json::to_vec(r).unwrap(),
                            process: Some(ProcessObservation { pid: r.pid, alive: true, start: Some(r.pid_start) }),
                        })
                        .collect(),
                    repos: Default::default(),
                },
                _ => Outcome::Ok,
            };
            seen.push(cmd);
            h.done(op, outcome);
        }
    }
}

fn create(h: &mut Harness, id: &str, session_config: Value) -> (String, String) {
    let uri = format!("ahp-session:/{id}");
    let rid = h.send_request(1, "createSession", json!({
        "channel": uri, "provider": "echo", "workingDirectories": ["file:///w"], "config": session_config
    }));
    h.settle_backend();
    assert_eq!(h.take_reply(1, rid).expect("reply")["result"], Value::Null);
    (uri, format!("ahp-chat:/ahp-session@{id}"))
}

fn meta(h: &Harness, uri: &str) -> serde_json::Map<String, Value> {
    h.host.view().sessions.get(uri).expect("the session is held").resident().and_then(|r| r.session.meta.clone()).unwrap_or_default()
}

/// The kinds of the events `_meta` shows: those the latest change brought
/// (grouped by kind, in the order joined, updated, left, error).
fn events(h: &Harness, uri: &str) -> Vec<String> {
    let change = meta(h, uri)["ahpd.awarenessEvents"].as_object().cloned().unwrap_or_default();
    change.keys().filter(|k| k.starts_with("session_")).cloned().collect()
}

/// What `ahpd/listPeers` answers for `uri`.
fn listed(h: &Harness, uri: &str) -> Value {
    h.host.view().peers_answer(uri).expect("a known session")
}

/// The types of the session's last events, as `ahpd/listPeers` answers.
fn all_events(h: &Harness, uri: &str) -> Vec<String> {
    listed(h, uri)["events"].as_array().unwrap().iter().map(|e| e["type"].as_str().unwrap().to_owned()).collect()
}

/// The agent declares a write of `src/a.ts` and waits for the host.
fn declared_write(h: &mut Harness, chat: &str, turn: &str) {
    let start = StateAction::ChatToolCallStart(ChatToolCallStartAction {
        turn_id: turn.into(),
        tool_call_id: "w1".into(),
        meta: None,
        tool_name: "write_file".into(),
        display_name: "Write".into(),
        intention: None,
        contributor: None,
    });
    let mut m = serde_json::Map::new();
    m.insert("ahpd.writes".into(), json!(["src/a.ts"]));
    let ready = StateAction::ChatToolCallReady(ChatToolCallReadyAction {
        turn_id: turn.into(),
        tool_call_id: "w1".into(),
        meta: Some(m),
        contributor: None,
        intention: None,
        invocation_message: StringOrMarkdown::Plain("Write".into()),
        tool_input: None,
        confirmation_title: None,
        risk_assessment: None,
        edits: None,
        editable: None,
        confirmed: Some(ToolCallConfirmationReason::NotNeeded),
        options: None,
    });
    for a in [start, ready] {
        h.input(Input::Backend { chat: chat.into(), event: BackendEvent::Action(a) });
    }
}

fn confirms(h: &mut Harness) -> Vec<BackendCmd> {
    h.backend_cmds().into_iter().map(|(_, _, c)| c).filter(|c| matches!(c, BackendCmd::ConfirmTool { .. })).collect()
}

fn chat_activity(h: &Harness, uri: &str, chat: &str) -> u32 {
    h.host.view().sessions.get(uri).expect("the session is held").resident().unwrap().chats[chat].status & 0x1F
}

/// A live session publishes its record and scans; the peer in its
/// workspace shows on `_meta` (its count, a joined event) and in
/// `ahpd/listPeers` (its record); heartbeats republish but a heartbeat-only
/// change of the peer is no update and sends nothing; an activity change
/// is an update, `_meta` showing only the new event.
#[test]
fn peers_show_on_meta_and_heartbeat_noise_is_no_update() {
    let mut h = Harness::new(config());
    h.connect(1, "c");
    let (uri, _chat) = create(&mut h, "s1", json!({}));
    let cmds = answer(&mut h, &[peer("", 1_767_225_600_000)]);
    assert!(matches!(&cmds[0], RegistryCmd::Publish { name, record } if name == "100-ahp-session@s1.json" && record.working_directories == vec!["/w".to_owned()] && record.pid == 100));
    assert!(cmds.iter().any(|c| matches!(c, RegistryCmd::Scan { dirs } if dirs == &vec!["/w".to_owned()])));
    let m = meta(&h, &uri);
    assert_eq!(m["ahpd.peers"], json!({"count": 1}));
    assert_eq!(listed(&h, &uri)["peers"][0]["session"], "ahp-session:/peer");
    assert_eq!(m["ahpd.awareness"]["tier"], "warn");
    assert_eq!(events(&h, &uri), vec!["session_peer_joined"]);
    assert_eq!(m["ahpd.awarenessEvents"]["session_peer_joined"], json!(["ahp-session:/peer"]));
    assert!(m["ahpd.awarenessEvents"]["seq"].as_u64().is_some(), "{m:?}");

    h.request(1, "subscribe", json!({ "channel": uri }));
    h.frames(1);
    let shown = listed(&h, &uri)["peers"].clone();
    h.advance(5_000);
    let at = h.now.wall.0;
    let cmds = answer(&mut h, &[peer("", at)]);
    assert!(cmds.iter().any(|c| matches!(c, RegistryCmd::Publish { .. })), "the heartbeat republishes: {cmds:?}");
    assert_eq!(events(&h, &uri), vec!["session_peer_joined"], "heartbeat noise is no update");
    // Nor does a subscriber hear of it: the peer is shown as it was.
    assert_eq!(listed(&h, &uri)["peers"], shown);
    let heard: Vec<Value> = h.frames(1).into_iter().filter(|f| f.to_string().contains("session/metaChanged")).collect();
    assert!(heard.is_empty(), "a heartbeat alone is not broadcast: {heard:?}");

    h.advance(5_000);
    let at = h.now.wall.0;
    answer(&mut h, &[peer("editing", at)]);
    assert_eq!(events(&h, &uri), vec!["session_peer_updated"], "_meta shows the change's events only");
    assert_eq!(all_events(&h, &uri), vec!["session_peer_joined", "session_peer_updated"]);
    assert_eq!(listed(&h, &uri)["peers"][0]["activity"], "editing");
    let heard: Vec<Value> = h.frames(1).into_iter().filter(|f| f.to_string().contains("session/metaChanged")).collect();
    assert_eq!(heard.len(), 1, "the update is sent once: {heard:?}");

    h.advance(5_000);
    answer(&mut h, &[]);
    assert_eq!(events(&h, &uri), vec!["session_peer_left"]);
    assert_eq!(all_events(&h, &uri), vec!["session_peer_joined", "session_peer_updated", "session_peer_left"]);
    assert_eq!(meta(&h, &uri)["ahpd.peers"], json!({"count": 0}));
    assert_eq!(listed(&h, &uri)["peers"], json!([]));
}

/// A scan that fails is a recoverable `session_awareness_error`.
#[test]
fn a_failed_scan_is_a_recoverable_error() {
    let mut h = Harness::new(config());
    h.connect(1, "c");
    let (uri, _) = create(&mut h, "s1", json!({}));
    for (op, cmd) in registry(&mut h) {
        let outcome = match cmd {
            RegistryCmd::Scan { .. } => Outcome::Failed { message: "EACCES".into() },
            _ => Outcome::Ok,
        };
        h.done(op, outcome);
    }
    assert_eq!(events(&h, &uri), vec!["session_awareness_error"]);
    assert!(meta(&h, &uri)["ahpd.awareness"]["error"].as_str().unwrap().contains("EACCES"));
    // The next heartbeat scans again and clears the error.
    h.advance(5_000);
    answer(&mut h, &[]);
    assert_eq!(meta(&h, &uri)["ahpd.awareness"]["error"], Value::Null);
}

/// What a declared write to a path a peer claims does, by tier.
#[test]
fn tiers_decide_what_a_conflicting_write_does() {
    let cases = [
        (json!({"sessionAwareness": "coordinate"}), false),
        (json!({"sessionAwareness": "coordinate", "autoApprove": true}), true),
        (json!({"sessionAwareness": "warn"}), true),
        (json!({"sessionAwareness": "passive"}), true),
    ];
    for (i, (session_config, confirmed_by_host)) in cases.into_iter().enumerate() {
        let mut h = Harness::new(config());
        h.connect(1, "c");
        let (uri, chat) = create(&mut h, &format!("s{i}"), session_config.clone());
        answer(&mut h, &[peer("", 1_767_225_600_000)]);
        h.start_turn(1, &chat, 1, "t1", "go");
        h.settle_backend();
        declared_write(&mut h, &chat, "t1");
        let confirmed = confirms(&mut h);
        assert_eq!(!confirmed.is_empty(), confirmed_by_host, "{session_config}: {confirmed:?}");
        let activity = chat_activity(&h, &uri, &chat);
        if confirmed_by_host {
            assert_eq!(activity, 8, "{session_config}: runs (InProgress)");
        } else {
            assert_eq!(activity, 24, "{session_config}: waits for approval (InputNeeded)");
        }
    }
}

/// The agent's writes become the session's claims (published), and a
/// disposed session's record is removed.
#[test]
fn claims_are_published_and_a_disposed_session_is_removed() {
    let mut h = Harness::new(config());
    h.connect(1, "c");
    let (uri, chat) = create(&mut h, "s1", json!({}));
    answer(&mut h, &[]);
    h.input(Input::Backend { chat: chat.clone(), event: BackendEvent::Wrote { paths: vec!["src/../src/b.ts".into(), "/w/c.ts".into()] } });
    let cmds = answer(&mut h, &[]);
    let claims = cmds.iter().find_map(|c| match c {
        RegistryCmd::Publish { record, .. } => Some(record.claims.clone()),
        _ => None,
    });
    assert_eq!(claims, Some(vec!["/w/c.ts".to_owned(), "/w/src/b.ts".to_owned()]));
    let rid = h.send_request(1, "disposeSession", json!({"channel": uri}));
    h.settle();
    assert!(h.take_reply(1, rid).is_some());
    let cmds = answer(&mut h, &[]);
    assert!(cmds.iter().any(|c| matches!(c, RegistryCmd::Remove { name } if name == "100-ahp-session@s1.json")), "{cmds:?}");
}

/// `ahpd/listPeers` is a read: unknown sessions are -32001.
#[test]
fn list_peers_answers_and_refuses_unknown_sessions() {
    let mut h = Harness::new(config());
    h.connect(1, "c");
    let (uri, _) = create(&mut h, "s1", json!({}));
    answer(&mut h, &[peer("x", 1_767_225_600_000)]);
    let r = h.request(1, "ahpd/listPeers", json!({"channel": uri}));
    assert_eq!(r["result"]["peers"][0]["activity"], "x", "{r}");
    assert_eq!(r["result"]["events"][0]["type"], "session_peer_joined", "{r}");
    let r = h.request(1, "ahpd/listPeers", json!({"channel": "ahp-session:/nope"}));
    assert_eq!(r["error"]["code"], -32001, "{r}");
}

/// Scans keep a least gap between their starts (`scan_gap_ms`): a second
/// session's record, published right after the first scan began, waits for
/// the gap, then one scan serves it, and the peer that scan finds reaches
/// both sessions' `_meta` (issue 21: a burst of status changes shares one
/// scan and one round of peer updates).
#[test]
fn scans_keep_their_gap_and_a_burst_shares_one() {
    let mut config = config();
    config.awareness.scan_gap_ms = 250;
    let mut h = Harness::new(config);
    h.connect(1, "c");
    let (first, _) = create(&mut h, "s1", json!({}));
    let scans = |cmds: &[(OpId, RegistryCmd)]| cmds.iter().filter(|(_, c)| matches!(c, RegistryCmd::Scan { .. })).count();
    let cmds = registry(&mut h);
    assert_eq!(scans(&cmds), 1, "the first scan starts at once: {cmds:?}");
    for (op, cmd) in cmds {
        let outcome = match cmd {
            RegistryCmd::Scan { .. } => Outcome::RegistryScanned { files: Vec::new(), repos: Default::default() },
            _ => Outcome::Ok,
        };
        h.done(op, outcome);
    }
    let scan_started = h.now.mono;
    h.advance(10);
    let (second, _) = create(&mut h, "s2", json!({}));
    let cmds = registry(&mut h);
    assert!(cmds.iter().any(|(_, c)| matches!(c, RegistryCmd::Publish { name, .. } if name.contains("s2"))), "s2 is published at once: {cmds:?}");
    assert_eq!(scans(&cmds), 0, "no scan within the gap: {cmds:?}");
    for (op, _) in cmds {
        h.done(op, Outcome::Ok);
    }
    assert_eq!(h.host.next_deadline(), Some(scan_started.plus_ms(250)), "the host asks to be called when the gap ends");
    h.advance(230);
    let cmds = registry(&mut h);
    assert_eq!(scans(&cmds), 0, "still within the gap: {cmds:?}");
    for (op, _) in cmds {
        h.done(op, Outcome::Ok);
    }
    h.advance(10);
    let at = h.now.wall.0;
    let cmds = answer(&mut h, &[peer("", at)]);
    assert_eq!(cmds.iter().filter(|c| matches!(c, RegistryCmd::Scan { .. })).count(), 1, "one scan once the gap is over: {cmds:?}");
    for uri in [&first, &second] {
        assert_eq!(meta(&h, uri)["ahpd.peers"], json!({"count": 1}), "{uri} sees the peer");
        let peers: Vec<Value> = listed(&h, uri)["peers"].as_array().cloned().unwrap_or_default();
        assert!(peers.iter().any(|p| p["session"] == "ahp-session:/peer"), "{uri} sees the peer: {peers:?}");
    }
}
