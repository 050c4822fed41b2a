//! Scenarios for "The life of a session" (Sessions page): createSession
//! order, provisional sessions, first turns, dispose, and protocol errors.

use ahpd_core::{BackendCmd, Config, Outcome};
use ahpd_core::testkit::Harness;
use serde_json::{json, Value};

fn methods(frames: &[Value]) -> Vec<String> {
    frames
        .iter()
        .map(|f| match f["method"].as_str() {
            Some("action") => f["params"]["action"]["type"].as_str().unwrap_or("?").to_owned(),
            Some(m) => m.to_owned(),
            None => "reply".to_owned(),
        })
        .collect()
}

#[test]
fn a_fresh_session_is_provisional_until_its_first_turn_reaches_the_backend() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c1");
    let (uri, chat) = h.create(1, "s1");
    assert!(h.list(1).is_empty(), "a provisional session is not listed");
    let snap = h.request(1, "subscribe", json!({"channel": uri}));
    assert_eq!(snap["result"]["snapshot"]["state"]["lifecycle"], "creating");
    h.request(1, "subscribe", json!({"channel": chat}));
    h.frames(1);

    h.start_turn(1, &chat, 1, "t1", "hello world");
    let sends: Vec<_> = h.backend_cmds();
    assert!(matches!(&sends[..], [(_, c, BackendCmd::Send { turn_id, .. })] if c == &chat && turn_id == "t1"));
    let frames = h.frames(1);
    assert!(!methods(&frames).contains(&"root/sessionAdded".to_owned()), "not announced before the backend took the turn");
    // The echo carries the client's origin.
    let echo = frames.iter().find(|f| f["params"]["action"]["type"] == "chat/turnStarted").expect("echo");
    assert_eq!(echo["params"]["origin"]["clientId"], "c1");
    assert_eq!(echo["params"]["origin"]["clientSeq"], 1);

    let op = sends[0].0;
    h.done(op, Outcome::Ok);
    let order = methods(&h.frames(1));
    let added = order.iter().position(|m| m == "root/sessionAdded").expect("sessionAdded");
    let ready = order.iter().position(|m| m == "session/ready").expect("ready");
    assert!(added < ready, "sessionAdded before session/ready: {order:?}");
    let rows = h.list(1);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["title"], "hello world", "titled from the first message");
}

#[test]
fn a_first_turn_that_fails_fails_the_creation_and_a_resend_retries() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c1");
    let (uri, chat) = h.create(1, "s1");
    h.request(1, "subscribe", json!({"channel": uri}));
    h.request(1, "subscribe", json!({"channel": chat}));
    h.frames(1);
    h.start_turn(1, &chat, 1, "t1", "boom");
    let (op, _, _) = h.backend_cmds().remove(0);
    h.done(op, Outcome::Failed { message: "agent refused".into() });
    let order = methods(&h.frames(1));
    let error = order.iter().position(|m| m == "chat/error").expect("chat/error");
    let failed = order.iter().position(|m| m == "session/creationFailed").expect("creationFailed");
    let added = order.iter().position(|m| m == "root/sessionAdded").expect("sessionAdded");
    assert!(error < failed && failed < added, "{order:?}");
    assert_eq!(h.list(1).len(), 1, "listed once announced");

    // Sent again: the start owed is tried again, then the turn goes out.
    h.start_turn(1, &chat, 2, "t2", "again");
    let cmds = h.settle_backend();
    assert!(cmds.iter().any(|(_, c)| matches!(c, BackendCmd::Start { resume: false, .. })), "{cmds:?}");
    assert!(cmds.iter().any(|(_, c)| matches!(c, BackendCmd::Send { turn_id, .. } if turn_id == "t2")));
    assert!(methods(&h.frames(1)).contains(&"session/ready".to_owned()));
}

#[test]
fn a_refused_start_leaves_no_session_behind() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c1");
    let rid = h.send_request(1, "createSession", json!({"channel": "ahp-session:/x1", "provider": "echo"}));
    let (op, _, _) = h.backend_cmds().remove(0);
    h.done(op, Outcome::Failed { message: "no credentials".into() });
    let reply = h.take_reply(1, rid).expect("reply");
    assert_eq!(reply["error"]["code"], -32603);
    assert!(reply["error"]["message"].as_str().unwrap_or("").contains("no credentials"));
    // The URI is free again.
    let (_, _) = h.create(1, "x1");
    assert!(h.store_ops().is_empty(), "nothing stored for a provisional session");
}

#[test]
fn create_on_an_existing_uri_is_session_already_exists() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c1");
    h.create(1, "dup");
    let r = h.request(1, "createSession", json!({"channel": "ahp-session:/dup", "provider": "echo"}));
    assert_eq!(r["error"]["code"], -32003);
    let r = h.request(1, "createSession", json!({"channel": "ahp-session:/other", "provider": "nope"}));
    assert_eq!(r["error"]["code"], -32002);
}

#[test]
fn hostile_ids_are_refused_before_anything_happens() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c1");
    for bad in ["ahp-session:/../x", "ahp-session:/..", "ahp-session:/a/b", "ahp-session:/a\\b", "ahp-session:/%2e%2e%2f", "ahp-session:/CON", "ahp-session:/"] {
        let r = h.request(1, "createSession", json!({"channel": bad, "provider": "echo"}));
        assert_eq!(r["error"]["code"], -32602, "{bad}: {r}");
    }
    assert!(h.backend_cmds().is_empty() && h.store_ops().is_empty());
}

#[test]
fn protocol_errors_get_their_codes_and_the_host_carries_on() {
    let mut h = Harness::new(Config::default());
    h.input(ahpd_core::Input::Connected { conn: ahpd_core::ConnId(1) });
    h.raw(1, "{");
    let f = h.frames(1);
    assert_eq!(f[0]["error"]["code"], -32700);
    assert_eq!(f[0]["id"], Value::Null);
    // A response is never answered, even one whose id is null (JSON-RPC
    // 2.0 lets an error response carry one).
    h.raw(1, r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}"#);
    h.raw(1, r#"{"jsonrpc":"2.0","id":"x","result":{}}"#);
    assert_eq!(h.frames(1), Vec::<Value>::new(), "responses get no answer");
    let r = h.request(1, "ping", json!({"channel": "ahp-root://"}));
    assert_eq!(r["result"], Value::Null, "ping before initialize");
    let r = h.request(1, "listSessions", json!({"channel": "ahp-root://"}));
    assert_eq!(r["error"]["code"], -32600, "initialize first");
    let r = h.request(1, "initialize", json!({"channel": "ahp-root://", "protocolVersions": ["0.1.0"], "clientId": "x"}));
    assert_eq!(r["error"]["code"], -32005);
    assert_eq!(r["error"]["data"]["supportedVersions"], json!(["1.0.0", "0.9.0"]));
    h.connect(2, "c2");
    assert_eq!(h.request(2, "nope", json!({}))["error"]["code"], -32601);
    // A notification sent as a request is told so, not "method not found".
    let r = h.request(2, "dispatchAction", json!({"channel": "ahp-root://", "clientSeq": 1, "action": {"type": "root/x"}}));
    assert_eq!(r["error"]["code"], -32600);
    assert!(r["error"]["message"].as_str().is_some_and(|m| m.contains("notification")), "{r}");
    // A turn without its required `startedAt` is refused saying a field may
    // be missing, not that the type is never taken.
    let (_, chat) = h.create(2, "no-started-at");
    h.frames(2);
    h.dispatch(2, &chat, 7, json!({"type": "chat/turnStarted", "turnId": "t1", "message": {"text": "hi", "origin": {"kind": "user"}}}));
    let frames = h.frames(2);
    let echo = frames.iter().find(|f| f["params"]["action"]["type"] == "chat/turnStarted").expect("the action is echoed");
    let reason = echo["params"]["rejectionReason"].as_str().expect("rejected");
    assert!(reason.contains("chat/turnStarted") && reason.contains("required field"), "{reason}");
    assert_eq!(h.request(2, "subscribe", json!({"channel": "ahp-session:/nobody"}))["error"]["code"], -32001);
    assert_eq!(h.request(2, "createSession", json!({"nope": 1}))["error"]["code"], -32602);
    assert_eq!(h.request(2, "disposeSession", json!({"channel": "ahp-session:/nobody"}))["error"]["code"], -32001);
}

#[test]
fn dispose_tears_down_deletes_and_tells_every_client() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c1");
    h.connect(2, "c2");
    let (uri, chat) = h.create(1, "d1");
    h.start_turn(1, &chat, 1, "t1", "hi");
    h.settle_backend();
    h.agent_reply(&chat, "t1", "Echo: hi");
    h.frames(2);
    h.settle_store();
    let rid = h.send_request(1, "disposeSession", json!({"channel": uri}));
    // The record is replaced by its tombstone first (it stays disposed
    // across restarts while the backend's copy lasts); nothing of the
    // session is deleted before that write is durable.
    assert!(h.backend_cmds().is_empty(), "no backend delete before the tombstone is durable");
    let stores = h.store_ops();
    assert!(stores.iter().any(|(_, c)| matches!(c, ahpd_core::StoreCmd::Put { record, .. } if record.deleted)));
    for (op, _) in stores {
        h.done(op, Outcome::Ok);
    }
    assert!(h.take_reply(1, rid).is_none(), "no reply before the backend's copy is deleted");
    let cmds = h.settle_backend();
    assert!(cmds.iter().any(|(_, c)| matches!(c, BackendCmd::Delete { .. })));
    assert_eq!(h.take_reply(1, rid).expect("reply")["result"], Value::Null);
    assert!(methods(&h.frames(2)).contains(&"root/sessionRemoved".to_owned()));
    assert!(h.list(2).is_empty());
}

#[test]
fn a_dispose_the_store_refuses_deletes_nothing_and_keeps_the_turns() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c1");
    let (uri, chat) = h.create(1, "d2");
    h.start_turn(1, &chat, 1, "t1", "hi");
    h.settle_backend();
    h.agent_reply(&chat, "t1", "Echo: hi");
    h.settle_store();
    let rid = h.send_request(1, "disposeSession", json!({"channel": uri}));
    for (op, _) in h.store_ops() {
        h.done(op, Outcome::Failed { message: "disk full".into() });
    }
    let reply = h.take_reply(1, rid).expect("reply");
    assert!(reply["error"]["message"].as_str().unwrap_or("").contains("disk full"), "{reply}");
    let cmds = h.settle_backend();
    assert!(!cmds.iter().any(|(_, c)| matches!(c, BackendCmd::Delete { .. })), "a dispose that did not happen deletes nothing: {cmds:?}");
    assert_eq!(h.list(1).len(), 1, "the session stays");
}

#[test]
fn a_turn_is_echoed_only_after_its_store_write_is_durable() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c1");
    let (_, chat) = h.create(1, "w1");
    h.request(1, "subscribe", json!({"channel": chat}));
    h.frames(1);
    h.dispatch(1, &chat, 1, json!({"type": "chat/turnStarted", "turnId": "t1", "startedAt": "2000-01-01T00:00:00Z",
        "message": {"text": "x", "origin": {"kind": "user"}}}));
    assert!(h.frames(1).is_empty(), "no echo before durable");
    let (op, _) = h.store_ops().remove(0);
    h.done(op, Outcome::Failed { message: "disk full".into() });
    let f = h.frames(1);
    assert_eq!(f.len(), 1);
    assert!(f[0]["params"]["rejectionReason"].as_str().unwrap_or("").contains("disk full"));
    assert!(h.backend_cmds().is_empty(), "a turn that was not saved never reaches the agent");
}

/// Makes every pending store write durable and returns the records
/// written, as a restarted host would read them.
fn stored_records(h: &mut Harness) -> Vec<ahpd_core::SessionRecord> {
    let mut latest = std::collections::BTreeMap::new();
    loop {
        let ops = h.store_ops();
        if ops.is_empty() {
            return latest.into_values().collect();
        }
        for (op, cmd) in ops {
            if let ahpd_core::StoreCmd::Put { record, .. } = cmd {
                latest.insert(record.key().into_owned(), *record);
            }
            h.done(op, ahpd_core::Outcome::Ok);
        }
    }
}

#[test]
fn a_restarted_host_numbers_its_envelopes_above_the_last_process_and_a_reconnect_gets_snapshots() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c1");
    let (uri, chat) = h.create(1, "s1");
    let r = h.request(1, "subscribe", json!({"channel": chat}));
    assert!(r["result"]["snapshot"].is_object(), "{r}");
    h.dispatch(1, &chat, 1, json!({
        "type": "chat/turnStarted", "turnId": "t1", "startedAt": "2000-01-01T00:00:00Z",
        "message": {"text": "hi", "origin": {"kind": "user"}}
    }));
    let records = stored_records(&mut h);
    h.settle();
    h.agent_reply(&chat, "t1", "hello");
    let frames = h.frames(1);
    let last_seen = frames
        .iter()
        .filter_map(|f| f["params"]["serverSeq"].as_u64())
        .max()
        .expect("the client saw envelopes");
    // The daemon restarts a second later from what the store holds.
    let mut now = h.now;
    now.wall.0 += 1000;
    let mut h2 = Harness::with_records_at(Config::default(), records, now);
    h2.input(ahpd_core::Input::Connected { conn: ahpd_core::ConnId(1) });
    let rid = h2.send_request(1, "reconnect", json!({
        "channel": "ahp-root://", "clientId": "c1", "lastSeenServerSeq": last_seen, "subscriptions": ["ahp-root://", uri]
    }));
    // The session is only a row after the restart: it is woken first, and
    // the reply waits for it.
    assert_eq!(h2.take_reply(1, rid), None, "the reply waits for the wake");
    h2.settle_backend();
    let r = h2.take_reply(1, rid).expect("the reply once the session woke");
    assert_eq!(r["result"]["type"], "snapshot", "another process's envelopes are never replayed: {r}");
    let resources: Vec<&str> = r["result"]["snapshots"].as_array().expect("snapshots").iter().filter_map(|s| s["resource"].as_str()).collect();
    assert_eq!(resources, ["ahp-root://", uri.as_str()], "a snapshot of each channel named: {r}");
    let seqs: Vec<u64> = r["result"]["snapshots"].as_array().expect("snapshots").iter().filter_map(|s| s["fromSeq"].as_u64()).collect();
    assert!(!seqs.is_empty() && seqs.iter().all(|s| *s > last_seen), "new numbers start above the old ones: {seqs:?} vs {last_seen}");
}

/// A provisional session's other chat was made with a first message, whose
/// turn waits for that chat's agent to start; then the first turn fails the
/// creation. The waiting turn ends with the failed creation's error, and the
/// session sleeps holding no turn for an agent nothing would start (sim
/// seeds 17838, 52039, 62971 at d163ccb: the turn stayed in progress for
/// ever, and the session never settled).
#[test]
fn a_failed_creation_ends_the_turns_its_other_chats_held_for_their_start() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c1");
    let (uri, chat) = h.create(1, "s1");
    h.start_turn(1, &chat, 1, "t1", "boom");
    let (send, _, _) = h.backend_cmds().remove(0);
    let second = "ahp-chat:/second";
    let rid = h.send_request(
        1,
        "createChat",
        json!({"channel": uri, "chat": second, "initialMessage": {"text": "meanwhile", "origin": {"kind": "user"}}}),
    );
    h.settle_store();
    assert_eq!(h.take_reply(1, rid).expect("createChat answered")["result"], Value::Null);
    let cmds = h.backend_cmds();
    let (start, _, _) = cmds.iter().find(|(_, c, cmd)| c == second && matches!(cmd, BackendCmd::Start { .. })).cloned().expect("the second chat's agent starts");
    assert!(!cmds.iter().any(|(_, _, cmd)| matches!(cmd, BackendCmd::Send { .. })), "its turn waits for the start: {cmds:?}");
    h.request(1, "subscribe", json!({"channel": second}));
    h.frames(1);

    h.done(send, Outcome::Failed { message: "agent refused".into() });
    h.settle_store();
    let frames = h.frames(1);
    let err = frames
        .iter()
        .find(|f| f["params"]["channel"] == second && f["params"]["action"]["type"] == "chat/error")
        .unwrap_or_else(|| panic!("the second chat's turn ends: {frames:?}"));
    assert!(err["params"]["action"]["part"]["error"]["message"].as_str().unwrap_or("").contains("creation failed"), "{err}");
    let view = h.host.view();
    let s = view.sessions.get(&uri).expect("the session is held");
    assert!(s.is_asleep(), "the failed creation lets its agents go");
    assert!(s.work().pending_sends.is_empty(), "no turn is held for an agent nothing starts");

    // The start's late answer sends nothing; a message sent again tries the start again.
    h.done(start, Outcome::Started { conversation_id: "late".into(), history: Vec::new() });
    assert!(h.backend_cmds().iter().all(|(_, _, cmd)| !matches!(cmd, BackendCmd::Send { .. })));
    h.start_turn(1, second, 2, "t2", "again");
    let cmds = h.settle();
    assert!(cmds.iter().any(|(c, cmd)| c == second && matches!(cmd, BackendCmd::Send { turn_id, .. } if turn_id == "t2")), "{cmds:?}");
}
