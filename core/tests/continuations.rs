//! Typed continuations (issue 20): a request that waits (for a wake, or
//! behind a held handshake) is kept decoded and runs on from there. The
//! checks that read the host run again when it does, since the host may
//! have moved meanwhile; a frame that waited is answered as it would have
//! been had it run at once, in order.

use ahpd_core::grants::{Role, UsersDirectory};
use ahpd_core::{Config, ConnId, Input};
use ahpd_core::testkit::{users_directory, Harness};
use serde_json::{json, Value};

fn directory() -> UsersDirectory {
    users_directory(&[("member", Role::Member), ("guest", Role::Guest)])
}

fn sign_in(h: &mut Harness, conn: u64, who: &str) {
    let r = h.request(conn, "authenticate", json!({"channel": "ahp-root://", "resource": "ahpd", "token": format!("token-{who}")}));
    assert_eq!(r["result"], json!({}), "{r}");
}

/// A host restarted under `config` from the store of one in which session
/// `a` ran a turn (made by the member, on a host with users): `a` is a row.
fn restarted(config: impl Fn() -> Config) -> (Harness, String) {
    let mut h = Harness::new(config());
    h.connect(1, "c1");
    if config().users.is_some() {
        sign_in(&mut h, 1, "member");
    }
    let (a, _) = h.session_with_turn("a");
    let records = h.host.view().sessions.values().map(|s| s.record().clone()).collect();
    let h = Harness::with_records(config(), records);
    assert!(h.host.view().sessions.get(&a).is_some_and(|s| s.resident().is_none()), "a row after the restart");
    (h, a)
}

#[test]
fn a_chat_asked_for_while_its_session_wakes_is_checked_against_the_grant_held_when_the_wake_ends() {
    let config = || Config { users: Some(directory()), sleep_after_ms: 0, ..Config::default() };
    for (then, answer) in [("member", None), ("guest", Some(-32009))] {
        let (mut h, a) = restarted(config);
        h.connect(1, "c1");
        sign_in(&mut h, 1, "member");
        let rid = h.send_request(1, "createChat", json!({"channel": a, "chat": "ahp-chat:/second"}));
        assert_eq!(h.take_reply(1, rid), None, "it waits for the wake");
        // Signed in anew while it waits: the grant it runs on with is the
        // one held when the wake ends.
        sign_in(&mut h, 1, then);
        h.settle();
        let reply = h.take_reply(1, rid).expect("answered once the wake ended");
        match answer {
            None => assert_eq!(reply["result"], Value::Null, "{reply}"),
            Some(code) => assert_eq!(reply["error"]["code"], code, "{reply}"),
        }
        assert_eq!(h.host.view().chats.contains_key("ahp-chat:/second"), answer.is_none());
    }
}

#[test]
fn frames_that_do_not_decode_behind_a_held_handshake_are_answered_after_it_in_order() {
    let config = || Config { sleep_after_ms: 0, residency_limit: 10, ..Config::default() };
    let (mut h, a) = restarted(config);
    h.input(Input::Connected { conn: ConnId(2) });
    let init = h.send_request(2, "initialize", json!({
        "channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": "c2", "initialSubscriptions": [a],
    }));
    h.raw(2, "{");
    let bad = h.send_request(2, "fetchTurns", json!({"channel": 7}));
    h.raw(2, r#"{"jsonrpc":"1.0","id":41,"method":"ping"}"#);
    let ping = h.send_request(2, "ping", json!({}));
    assert_eq!(h.frames(2), Vec::<Value>::new(), "nothing is answered before the handshake");
    h.settle();
    let answers: Vec<(Value, Value)> = h
        .frames(2)
        .into_iter()
        .filter(|f| f.get("method").is_none())
        .map(|f| (f["id"].clone(), f["error"]["code"].clone()))
        .collect();
    assert_eq!(answers, [
        (json!(init), Value::Null),
        (Value::Null, json!(-32700)),
        (json!(bad), json!(-32602)),
        (json!(41), json!(-32600)),
        (json!(ping), Value::Null),
    ]);
}
