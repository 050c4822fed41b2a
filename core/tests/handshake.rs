//! `initialize` and `reconnect` naming sessions whose state is not held
//! (Sessions page, "Sleep and wake"; docs/REFERENCE-NOTES.md, 2.14): the reply
//! waits for their wakes and carries a snapshot of every channel named;
//! what cannot be woken or read is left out, never failing the handshake.

use ahpd_core::grants::{Role, UsersDirectory};
use ahpd_core::{BackendCmd, Config, ConnId, Effect, Input, Outcome};
use ahpd_core::testkit::Harness;
use serde_json::{json, Value};

fn config(residency_limit: usize) -> Config {
    Config { sleep_after_ms: 0, residency_limit, ..Config::default() }
}

fn records(h: &Harness) -> Vec<ahpd_core::SessionRecord> {
    h.host.view().sessions.values().map(|s| s.record().clone()).collect()
}

fn resident(h: &Harness, uri: &str) -> bool {
    h.host.view().sessions.get(uri).expect("the session is listed").resident().is_some()
}

fn phase(h: &Harness, uri: &str) -> &'static str {
    h.host.view().sessions.get(uri).expect("the session is listed").phase().name()
}

fn initialize(h: &mut Harness, conn: u64, channels: &[&str]) -> u64 {
    h.input(Input::Connected { conn: ConnId(conn) });
    h.send_request(conn, "initialize", json!({
        "channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": format!("client-{conn}"),
        "initialSubscriptions": channels,
    }))
}

fn resources(reply: &Value, list: &str) -> Vec<String> {
    reply["result"][list]
        .as_array()
        .unwrap_or_else(|| panic!("no {list}: {reply}"))
        .iter()
        .filter_map(|s| s["resource"].as_str().map(str::to_owned))
        .collect()
}

/// Whether `conn` was sent an envelope on `channel` among `frames`.
fn saw_envelope(frames: &[Value], channel: &str) -> bool {
    frames.iter().any(|f| f["method"] == "action" && f["params"]["channel"] == channel)
}

#[test]
fn initial_subscriptions_wake_what_a_restart_left_as_rows_and_answer_with_every_snapshot() {
    let mut h = Harness::new(config(10));
    h.connect(1, "c1");
    let (a, a_chat) = h.session_with_turn("a");
    let (_, b_chat) = h.session_with_turn("b");
    let mut h = Harness::with_records(config(10), records(&h));
    let rid = initialize(&mut h, 1, &["ahp-root://", &a, &a_chat, &b_chat]);
    assert_eq!(h.take_reply(1, rid), None, "the reply waits for the wakes");
    let starts: Vec<String> = h
        .backend_cmds()
        .into_iter()
        .filter_map(|(op, chat, cmd)| match cmd {
            BackendCmd::Start { resume: true, conversation_id, .. } => {
                h.done(op, Outcome::Started { conversation_id, history: Vec::new() });
                Some(chat)
            }
            _ => None,
        })
        .collect();
    assert_eq!(starts, [a_chat.clone(), b_chat.clone()], "both sessions resumed, each once");
    let reply = h.take_reply(1, rid).expect("answered once both woke");
    assert_eq!(resources(&reply, "snapshots"), ["ahp-root://", a.as_str(), a_chat.as_str(), b_chat.as_str()]);
    assert_eq!(reply["result"]["snapshots"][1]["state"]["title"], "hello", "its title, from its first message: {reply}");
    // The client is subscribed to what it named: another client's turn in
    // `a`'s chat reaches it.
    h.connect(2, "c2");
    h.start_turn(2, &a_chat, 1, "t2", "again");
    assert!(saw_envelope(&h.frames(1), &a_chat), "the chat's envelopes reach the first client");
}

#[test]
fn a_session_that_cannot_be_woken_is_left_out_and_the_rest_is_answered() {
    let mut h = Harness::new(config(10));
    h.connect(1, "c1");
    let (a, _) = h.session_with_turn("a");
    let (b, _) = h.session_with_turn("b");
    let mut h = Harness::with_records(config(10), records(&h));
    let rid = initialize(&mut h, 1, &[&a, &b]);
    for (op, chat, cmd) in h.backend_cmds() {
        let BackendCmd::Start { conversation_id, .. } = cmd else { continue };
        let outcome = if h.host.view().chats.get(&chat).map(|u| &**u) == Some(a.as_str()) {
            Outcome::Failed { message: "no such conversation".into() }
        } else {
            Outcome::Started { conversation_id, history: Vec::new() }
        };
        h.done(op, outcome);
    }
    let reply = h.take_reply(1, rid).expect("answered");
    assert!(reply.get("error").is_none(), "a failed wake does not fail the handshake: {reply}");
    assert_eq!(resources(&reply, "snapshots"), [b.as_str()]);
    assert_eq!(phase(&h, &a), "asleep", "it stays asleep for the next waker");
    assert!(!resident(&h, &a));
    // Nothing holds `a` for this client: a later subscribe tries again.
    let sid = h.send_request(1, "subscribe", json!({"channel": a}));
    h.settle_backend();
    assert!(h.take_reply(1, sid).expect("subscribed")["result"]["snapshot"].is_object());
}

#[test]
fn sessions_woken_for_a_handshake_are_held_until_it_answers_whatever_the_residency_limit() {
    let mut h = Harness::new(config(10));
    h.connect(1, "c1");
    let (a, _) = h.session_with_turn("a");
    let (b, _) = h.session_with_turn("b");
    let (c, _) = h.session_with_turn("c");
    let mut h = Harness::with_records(config(1), records(&h));
    let rid = initialize(&mut h, 1, &[&a, &b, &c]);
    // The wakes end one by one; none is taken by the limit before the
    // reply, though each is over it.
    let starts: Vec<_> = h.backend_cmds().into_iter().filter(|(_, _, cmd)| matches!(cmd, BackendCmd::Start { .. })).collect();
    assert_eq!(starts.len(), 3);
    let mut woken = Vec::new();
    for (op, chat, cmd) in starts {
        let BackendCmd::Start { conversation_id, .. } = cmd else { continue };
        h.done(op, Outcome::Started { conversation_id, history: Vec::new() });
        woken.push(h.host.view().chats.get(&chat).cloned().expect("a chat of a session"));
        h.advance(3_000);
        if woken.len() < 3 {
            assert_eq!(h.take_reply(1, rid), None, "still waiting");
            assert!(woken.iter().all(|s| resident(&h, s)), "{woken:?} all held");
        }
    }
    let reply = h.take_reply(1, rid).expect("answered");
    assert_eq!(resources(&reply, "snapshots"), [a.as_str(), b.as_str(), c.as_str()]);
    assert!([&a, &b, &c].iter().all(|s| resident(&h, s)), "watched sessions stay over the limit");
    // Once the client leaves, the limit applies again.
    h.input(Input::Disconnected { conn: ConnId(1) });
    h.advance(60_000);
    assert_eq!([&a, &b, &c].iter().filter(|s| resident(&h, s)).count(), 1);
}

#[test]
fn a_client_that_leaves_mid_handshake_pins_nothing_and_is_sent_nothing() {
    let mut h = Harness::new(config(10));
    h.connect(1, "c1");
    let (a, _) = h.session_with_turn("a");
    let (b, _) = h.session_with_turn("b");
    let mut h = Harness::with_records(config(1), records(&h));
    let rid = initialize(&mut h, 1, &[&a, &b]);
    h.input(Input::Disconnected { conn: ConnId(1) });
    h.settle_backend();
    assert_eq!(h.take_reply(1, rid), None);
    assert_eq!(h.frames(1), Vec::<Value>::new());
    assert_eq!([&a, &b].iter().filter(|s| resident(&h, s)).count(), 1, "the limit holds once nobody waits");
}

#[test]
fn a_reconnect_wakes_evicted_sessions_and_answers_with_their_snapshots() {
    let mut h = Harness::new(config(1));
    h.connect(1, "c1");
    let (a, a_chat) = h.session_with_turn("a");
    let last_seen = h.frames(1).iter().filter_map(|f| f["params"]["serverSeq"].as_u64()).max().unwrap_or(0);
    let (b, _) = h.session_with_turn("b");
    assert!(!resident(&h, &a), "the limit took the least recently used");
    h.input(Input::Disconnected { conn: ConnId(1) });
    h.input(Input::Connected { conn: ConnId(3) });
    let rid = h.send_request(3, "reconnect", json!({
        "channel": "ahp-root://", "clientId": "c1", "lastSeenServerSeq": last_seen,
        "subscriptions": ["ahp-root://", a_chat, "ahp-session:/never-made"]
    }));
    assert_eq!(h.take_reply(3, rid), None, "the reply waits for the wake");
    h.settle_backend();
    let reply = h.take_reply(3, rid).expect("answered");
    assert_eq!(reply["result"]["type"], "snapshot", "a rebuilt state is never replayed onto: {reply}");
    assert_eq!(resources(&reply, "snapshots"), ["ahp-root://", a_chat.as_str()]);
    assert!(resident(&h, &a) && !resident(&h, &b), "the watched one stays, the other went");
}

fn directory() -> UsersDirectory {
    ahpd_core::testkit::users_directory(&[("owner", Role::Member)])
}

#[test]
fn a_handshake_subscribes_only_to_what_the_connection_may_read() {
    let mut h = Harness::new(Config { users: Some(directory()), ..Config::default() });
    h.connect(1, "c1");
    let r = h.request(1, "authenticate", json!({"channel": "ahp-root://", "resource": "ahpd", "token": "token-owner"}));
    assert_eq!(r["result"], json!({}), "{r}");
    let (uri, chat) = h.create(1, "s");
    // Signed in with nobody: the root, the session and its chat are left
    // out, as `subscribe` would refuse them.
    let rid = initialize(&mut h, 2, &["ahp-root://", &uri, &chat]);
    let reply = h.take_reply(2, rid).expect("answered");
    assert_eq!(resources(&reply, "snapshots"), Vec::<String>::new(), "{reply}");
    h.create(1, "t");
    h.start_turn(1, &chat, 1, "t1", "hi");
    let frames = h.frames(2);
    assert!(frames.iter().all(|f| f["method"] != "root/sessionAdded"), "no catalogue rows: {frames:?}");
    assert!(!saw_envelope(&frames, &chat), "no turns");
    // Nor can it tell which channels exist: a subscribe and an action are
    // refused in the same words for a session that exists and one that
    // does not.
    let refusal = |h: &mut Harness, channel: &str| {
        let r = h.request(2, "subscribe", json!({"channel": channel}));
        h.dispatch(2, channel, 9, json!({"type": "session/isReadChanged", "isRead": true}));
        // A second trial found actions no client may send told apart.
        h.dispatch(2, channel, 10, json!({"type": "chat/bogus"}));
        h.dispatch(2, channel, 11, json!({"type": "root/activeSessionsChanged", "activeSessions": 3}));
        let echo: Vec<Value> = h.frames(2).into_iter().map(|f| f["params"]["rejectionReason"].clone()).collect();
        assert_eq!(echo.len(), 3, "{echo:?}");
        (r["error"].clone(), echo)
    };
    assert_eq!(refusal(&mut h, &uri), refusal(&mut h, "ahp-session:/never-made"));
    let rid = h.send_request(2, "reconnect", json!({
        "channel": "ahp-root://", "clientId": "c2", "lastSeenServerSeq": 0, "subscriptions": ["ahp-root://", chat]
    }));
    let reply = h.take_reply(2, rid).expect("answered");
    let shown: Vec<&Value> = reply["result"]["snapshots"].as_array().map(|s| s.iter().collect()).unwrap_or_default();
    assert!(shown.is_empty(), "{reply}");
    if reply["result"]["type"] == "replay" {
        assert_eq!(reply["result"]["missing"], json!(["ahp-root://", chat]), "{reply}");
        assert_eq!(reply["result"]["actions"], json!([]), "{reply}");
    }
    // Signed in before the handshake, with `authenticate` or with the
    // handshake's bearer token, the same names are answered.
    h.input(Input::Connected { conn: ConnId(3) });
    let r = h.request(3, "authenticate", json!({"channel": "ahp-root://", "resource": "ahpd", "token": "token-owner"}));
    assert_eq!(r["result"], json!({}), "{r}");
    h.input(Input::Connected { conn: ConnId(4) });
    h.input(Input::Authenticate { conn: ConnId(4), token: "token-owner".into() });
    assert!(h.frames(4).is_empty(), "a bearer sign-in is answered to nobody");
    for conn in [3, 4] {
        let rid = h.send_request(conn, "initialize", json!({
            "channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": format!("c{conn}"), "initialSubscriptions": ["ahp-root://", uri, chat],
        }));
        let reply = h.take_reply(conn, rid).expect("answered");
        assert_eq!(resources(&reply, "snapshots"), ["ahp-root://", uri.as_str(), chat.as_str()], "conn {conn}");
    }
}

#[test]
fn a_bearer_token_that_names_nobody_closes_the_connection_and_says_why() {
    let mut h = Harness::new(Config { users: Some(directory()), ..Config::default() });
    h.input(Input::Connected { conn: ConnId(1) });
    h.pending.clear();
    h.input(Input::Authenticate { conn: ConnId(1), token: "not-a-token".into() });
    match &h.pending[..] {
        [Effect::Log(log), Effect::Close { conn: ConnId(1), reason: None }] => {
            assert_eq!(log.event, "client.auth_failed");
            assert!(log.detail.contains("bearer token matches no user") && !log.detail.contains("not-a-token"), "{log:?}");
        }
        other => panic!("a log line saying why, then the close, and nothing sent: {other:?}"),
    }
    assert!(h.host.view().conns.get(&ConnId(1)).is_some_and(|c| c.principal.is_none()));
    // On a host with no users directory there is nobody to be: nothing
    // happens, the connection is served as any other.
    let mut h = Harness::new(Config::default());
    h.input(Input::Connected { conn: ConnId(1) });
    h.pending.clear();
    h.input(Input::Authenticate { conn: ConnId(1), token: "whatever".into() });
    assert!(h.pending.is_empty(), "{:?}", h.pending);
    h.connect(2, "c2");
}

#[test]
fn a_held_session_named_beside_sleeping_ones_is_kept_while_they_wake() {
    // Found by a new-user trial: with the limit at 1, the wake of one named
    // session evicted another named one that was held and unwatched.
    let mut h = Harness::new(config(1));
    h.connect(1, "c1");
    let (a, _) = h.session_with_turn("a");
    let (b, _) = h.session_with_turn("b");
    let (c, _) = h.session_with_turn("c");
    h.input(Input::Disconnected { conn: ConnId(1) });
    h.advance(60_000);
    assert!(!resident(&h, &a) && !resident(&h, &b) && resident(&h, &c), "only the newest is held");
    let rid = initialize(&mut h, 2, &[&a, &b, &c]);
    h.settle_backend();
    let reply = h.take_reply(2, rid).expect("answered");
    assert_eq!(resources(&reply, "snapshots"), [a.as_str(), b.as_str(), c.as_str()]);
    h.connect(3, "c3");
    let c_chat = h.host.view().sessions.get(&c).map(|s| s.record().default_chat().into_owned()).expect("c");
    h.start_turn(3, &c_chat, 1, "t9", "still there?");
    assert!(saw_envelope(&h.frames(2), &c), "the first client hears of the turn in c");
}

#[test]
fn frames_sent_while_a_handshake_waits_run_after_its_answer_in_order() {
    // Found by a new-user trial: they were refused ("initialize first") and
    // a message dispatched meanwhile was lost.
    let mut h = Harness::new(config(10));
    h.connect(1, "c1");
    let (a, a_chat) = h.session_with_turn("a");
    let (_, b_chat) = h.session_with_turn("b");
    let mut h = Harness::with_records(config(10), records(&h));
    let rid = initialize(&mut h, 1, &[&a, &a_chat]);
    let list = h.send_request(1, "listSessions", json!({"channel": "ahp-root://"}));
    let sub = h.send_request(1, "subscribe", json!({"channel": b_chat}));
    h.dispatch(1, &a_chat, 1, json!({
        "type": "chat/turnStarted", "turnId": "t2", "startedAt": "2000-01-01T00:00:00Z",
        "message": {"text": "sent early", "origin": {"kind": "user"}}
    }));
    assert_eq!(h.frames(1), Vec::<Value>::new(), "nothing is answered before the handshake");
    h.settle();
    let frames = h.frames(1);
    let position = |pred: &dyn Fn(&Value) -> bool| frames.iter().position(pred);
    let init_at = position(&|f| f["id"] == rid).expect("initialize answered");
    let list_at = position(&|f| f["id"] == list).expect("listSessions answered");
    let sub_at = position(&|f| f["id"] == sub).expect("subscribe answered");
    let echo_at = position(&|f| f["params"]["action"]["turnId"] == "t2").expect("the turn is echoed");
    assert!(init_at < list_at && list_at < sub_at, "{frames:?}");
    assert!(frames[list_at]["result"]["items"].is_array(), "{}", frames[list_at]);
    assert!(frames[sub_at]["result"]["snapshot"].is_object(), "{}", frames[sub_at]);
    assert!(frames[echo_at]["params"]["rejectionReason"].is_null(), "the early message ran: {}", frames[echo_at]);
}

#[test]
fn a_handshake_waits_at_most_ten_seconds_then_answers_with_what_is_held() {
    let mut h = Harness::new(config(10));
    h.connect(1, "c1");
    let (a, _) = h.session_with_turn("a");
    let mut h = Harness::with_records(config(10), records(&h));
    let rid = initialize(&mut h, 1, &["ahp-root://", &a]);
    let starts = h.backend_cmds();
    h.advance(9_999);
    assert_eq!(h.take_reply(1, rid), None, "still waiting");
    h.advance(1);
    let reply = h.take_reply(1, rid).expect("answered when the wait is over");
    assert_eq!(resources(&reply, "snapshots"), ["ahp-root://"]);
    // The wake goes on; when it ends, the client is not subscribed to it.
    for (op, _, cmd) in starts {
        if let BackendCmd::Start { conversation_id, .. } = cmd {
            h.done(op, Outcome::Started { conversation_id, history: Vec::new() });
        }
    }
    assert!(resident(&h, &a));
    assert!(!h.frames(1).iter().any(|f| f["id"] == rid), "answered once");
    assert!(!h.host.view().conns[&ConnId(1)].subscriptions.contains(&a));
}

#[test]
fn reconnect_holds_to_the_subscription_limit_as_initialize_does() {
    let mut cfg = config(10);
    cfg.limits.subscriptions_per_conn = 2;
    let mut h = Harness::new(cfg);
    h.input(Input::Connected { conn: ConnId(1) });
    let r = h.request(1, "reconnect", json!({
        "channel": "ahp-root://", "clientId": "c1", "lastSeenServerSeq": 0,
        "subscriptions": ["ahp-root://", "ahp-session:/a", "ahp-session:/b"]
    }));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let r = h.request(1, "initialize", json!({
        "channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": "c1",
        "initialSubscriptions": ["ahp-root://", "ahp-session:/a", "ahp-session:/b"]
    }));
    assert_eq!(r["error"]["code"], -32602, "{r}");
}

#[test]
fn frames_behind_a_held_handshake_are_bounded_in_bytes_not_only_in_count() {
    // Issue 25: 256 frames of up to 4 MiB each could wait behind one
    // handshake, a gigabyte a connection; now at most 16 MiB of their text.
    let mut h = Harness::new(config(10));
    h.connect(1, "c1");
    let (a, a_chat) = h.session_with_turn("a");
    let mut h = Harness::with_records(config(10), records(&h));
    let rid = initialize(&mut h, 1, &[&a, &a_chat]);
    let pad = "p".repeat(3 << 20);
    let max = ahpd_core::host::HANDSHAKE_QUEUE_MAX_BYTES;
    let mut kept = Vec::new();
    let mut refused = None;
    for _ in 0..8 {
        let id = h.send_request(1, "ping", json!({"channel": "ahp-root://", "pad": pad}));
        match h.take_reply(1, id) {
            Some(reply) => {
                refused = Some(reply);
                break;
            }
            None => kept.push(id),
        }
    }
    let refused = refused.expect("a frame past the byte bound is refused at once");
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap_or("").contains("bytes"), "{refused}");
    assert_eq!(kept.len(), max / ((3 << 20) + 100), "as many wait as fit in {max} bytes");
    h.settle();
    assert!(h.take_reply(1, rid).is_some(), "the handshake is answered");
    for id in kept {
        assert!(h.take_reply(1, id).is_some(), "ping {id} waited and was answered after the handshake");
    }
}
