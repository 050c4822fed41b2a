//! Bounds on what one client may ask (issue: hostile input): each refusal
//! is a clear error, and the host goes on serving.

use ahpd_core::{Config, Limits};
use ahpd_core::testkit::Harness;
use serde_json::json;

fn limited(limits: Limits) -> Harness {
    Harness::new(Config { limits, ..Config::default() })
}

#[test]
fn frames_over_the_size_limit_are_refused() {
    let mut h = limited(Limits { frame_max_bytes: 200, ..Limits::default() });
    h.connect(1, "c");
    let big = format!(r#"{{"jsonrpc":"2.0","id":9,"method":"ping","params":{{"channel":"ahp-root://","pad":"{}"}}}}"#, "x".repeat(300));
    h.raw(1, &big);
    let f = h.frames(1);
    assert_eq!(f[0]["error"]["code"], -32600);
    assert!(f[0]["error"]["message"].as_str().unwrap_or("").contains("limit"));
    assert_eq!(h.request(1, "ping", json!({"channel": "ahp-root://"}))["result"], serde_json::Value::Null);
}

#[test]
fn subscriptions_per_connection_are_bounded() {
    let mut h = limited(Limits { subscriptions_per_conn: 2, ..Limits::default() });
    h.connect(1, "c"); // holds ahp-root:// already
    let (uri, chat) = h.create(1, "s");
    assert!(h.request(1, "subscribe", json!({"channel": uri}))["result"].is_object());
    let r = h.request(1, "subscribe", json!({"channel": chat}));
    assert_eq!(r["error"]["code"], -32602);
    assert!(r["error"]["message"].as_str().unwrap_or("").contains("too many subscriptions"));
    h.request(1, "unsubscribe", json!({"channel": uri}));
    assert!(h.request(1, "subscribe", json!({"channel": chat}))["result"].is_object());
}

#[test]
fn message_text_is_bounded() {
    let mut h = limited(Limits { message_text_max_bytes: 10, ..Limits::default() });
    h.connect(1, "c");
    let (_, chat) = h.create(1, "s");
    h.request(1, "subscribe", json!({"channel": chat}));
    h.frames(1);
    h.start_turn(1, &chat, 1, "t1", "this is far more than ten bytes");
    let f = h.frames(1);
    assert!(f[0]["params"]["rejectionReason"].as_str().unwrap_or("").contains("limit"));
    assert!(h.backend_cmds().is_empty());
}

#[test]
fn a_flooding_connection_is_slowed_and_others_are_not() {
    let mut h = limited(Limits { frames_per_second: 10, frames_burst: 20, ..Limits::default() });
    h.connect(1, "flood");
    h.connect(2, "calm");
    let mut refused = 0;
    for _ in 0..50 {
        let r = h.request(1, "ping", json!({"channel": "ahp-root://"}));
        if r["error"]["message"].as_str().unwrap_or("").contains("rate limit") {
            refused += 1;
        }
    }
    assert!(refused >= 25, "{refused} refused");
    assert_eq!(h.request(2, "ping", json!({"channel": "ahp-root://"}))["result"], serde_json::Value::Null);
    h.advance(2_000);
    assert_eq!(h.request(1, "ping", json!({"channel": "ahp-root://"}))["result"], serde_json::Value::Null, "credit comes back with time");
}

#[test]
fn hostile_ids_are_refused_by_every_command_that_takes_one() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c");
    let (uri, _) = h.create(1, "s");
    let long = format!("ahp-session:/{}", "a".repeat(300));
    for bad in ["ahp-session:/../x", "ahp-session:/..", "ahp-session:/.", "ahp-session:/a/b", "ahp-session:/a\\b",
        "/etc/passwd", "ahp-session:/%2e%2e%2f", "ahp-session:/a\u{0}b", "", long.as_str(), "ahp-session:/CON"] {
        assert_eq!(h.request(1, "createSession", json!({"channel": bad}))["error"]["code"], -32602, "create {bad:?}");
        let code = h.request(1, "disposeSession", json!({"channel": bad}))["error"]["code"].clone();
        assert!(code == -32602 || code == -32001, "dispose {bad:?}: {code}");
        assert_eq!(h.request(1, "subscribe", json!({"channel": bad}))["error"]["code"], -32001, "subscribe {bad:?}");
        assert_eq!(h.request(1, "createChat", json!({"channel": uri, "chat": bad}))["error"]["code"], -32602, "createChat {bad:?}");
    }
    assert!(h.store_ops().is_empty(), "nothing was written");
    assert!(h.backend_cmds().is_empty(), "no agent was asked anything");
}

#[test]
fn connections_over_the_limit_are_refused_with_a_readable_error_and_the_place_comes_back() {
    use ahpd_core::{ConnId, Effect, Input};
    let mut h = limited(Limits { connections_max: 2, ..Limits::default() });
    h.connect(1, "a");
    h.connect(2, "b");
    h.drop_logs();
    h.input(Input::Connected { conn: ConnId(3) });
    let f = h.frames(3);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0]["id"], serde_json::Value::Null);
    assert_eq!(f[0]["error"]["code"], -32600);
    assert!(f[0]["error"]["message"].as_str().unwrap_or("").contains("connection limit"), "{f:?}");
    assert!(h.pending.iter().any(|e| matches!(e, Effect::Close { conn, policy: None } if conn.0 == 3)), "the refused connection is closed");
    assert!(h.pending.iter().any(|e| matches!(e, Effect::Log(l) if l.event == "limit.connections")), "and logged");
    // A request it sends before the close lands gets the same answer and
    // changes nothing.
    let r = h.request(3, "initialize", json!({"channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": "c"}));
    assert_eq!(r["error"]["code"], -32600);
    assert!(!h.host.view().conns.contains_key(&ConnId(3)));
    // The others are served.
    assert_eq!(h.request(1, "ping", json!({"channel": "ahp-root://"}))["result"], serde_json::Value::Null);
    // The refused connection going does not free a place; an admitted one does.
    h.input(Input::Disconnected { conn: ConnId(3) });
    h.input(Input::Connected { conn: ConnId(4) });
    assert_eq!(h.frames(4)[0]["error"]["code"], -32600, "still full");
    h.input(Input::Disconnected { conn: ConnId(4) });
    h.input(Input::Disconnected { conn: ConnId(2) });
    h.connect(5, "e");
    assert_eq!(h.request(5, "ping", json!({"channel": "ahp-root://"}))["result"], serde_json::Value::Null);
}
