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
    // Closed with 1013 "try again later" and words saying why (issue 25).
    let close = h.pending.iter().find_map(|e| match e {
        Effect::Close { conn, reason: Some(reason) } if conn.0 == 3 => Some(reason.clone()),
        _ => None,
    });
    let close = close.expect("the refused connection is closed with a reason");
    assert_eq!(close.code(), 1013, "{close:?}");
    assert!(close.words().contains("connection limit") && close.words().len() <= 123, "{close:?}");
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

/// The `limit.rate` lines of the effects pending, as (connection, count).
fn rate_lines(h: &mut ahpd_core::testkit::Harness) -> Vec<(u64, u64)> {
    use ahpd_core::Effect;
    h.take(|e| match e {
        Effect::Log(l) if l.event == "limit.rate" => {
            let words: Vec<&str> = l.detail.split_whitespace().collect();
            let conn = words.get(1).and_then(|w| w.parse().ok()).expect("a connection number");
            let at = words.iter().position(|w| *w == "frames/s:").expect("a count");
            let count = words.get(at + 1).and_then(|w| w.parse().ok()).expect("a count");
            Some((conn, count))
        }
        _ => None,
    })
}

/// Issue 25: refusals over the frame rate are said as one `limit.rate` line
/// per connection per second with the count since the last line (never one
/// per frame), the last count when the connection goes; the lines' counts
/// add up to every frame refused, for each connection apart.
#[test]
fn rate_refusals_are_one_line_per_connection_per_second_with_counts() {
    let mut h = limited(Limits { frames_per_second: 10, frames_burst: 20, ..Limits::default() });
    h.connect(1, "a");
    h.connect(2, "b");
    h.drop_logs();
    let mut refused = std::collections::BTreeMap::<u64, u64>::new();
    let mut lines = Vec::new();
    // Four rounds 400 ms apart (1.2 s in all, well under the close after
    // 10 s): 100 frames from each connection a round.
    for _ in 0..4 {
        for conn in [1u64, 2] {
            for _ in 0..100 {
                let r = h.request(conn, "ping", json!({"channel": "ahp-root://"}));
                if r["error"]["message"].as_str().unwrap_or("").contains("rate limit") {
                    *refused.entry(conn).or_default() += 1;
                }
            }
        }
        lines.extend(rate_lines(&mut h));
        h.advance(400);
    }
    assert!(refused.values().all(|n| *n > 300), "{refused:?}");
    // At 0 ms and at 1,200 ms (the first refusal a second after the last
    // line): two lines each, not one a frame.
    for conn in [1u64, 2] {
        let mine = lines.iter().filter(|(c, _)| *c == conn).count();
        assert_eq!(mine, 2, "connection {conn}: {lines:?}");
    }
    // Going, each says the rest; then every refusal was counted once.
    h.input(ahpd_core::Input::Disconnected { conn: ahpd_core::ConnId(1) });
    h.input(ahpd_core::Input::Disconnected { conn: ahpd_core::ConnId(2) });
    lines.extend(rate_lines(&mut h));
    for conn in [1u64, 2] {
        let counted: u64 = lines.iter().filter(|(c, _)| *c == conn).map(|(_, n)| n).sum();
        assert_eq!(counted, refused[&conn], "connection {conn}: {lines:?}");
    }
    assert_eq!(lines.len(), 6, "{lines:?}");
}

/// Issue 25: a session title over `title_max_bytes` is refused unapplied
/// with a reason naming the field and the cap, sent to the sender alone;
/// nothing is written or broadcast. One at the cap is taken.
#[test]
fn a_title_over_its_cap_is_refused_and_nothing_is_written_or_broadcast() {
    let mut h = limited(Limits { title_max_bytes: 16, ..Limits::default() });
    h.connect(1, "c");
    h.connect(2, "watcher");
    let (uri, chat) = h.session_with_turn("s");
    h.request(1, "subscribe", json!({"channel": uri}));
    h.request(2, "subscribe", json!({"channel": uri}));
    h.request(2, "subscribe", json!({"channel": "ahp-root://"}));
    let _ = chat;
    h.settle_no_repo();
    h.store_ops();
    h.frames(1);
    h.frames(2);
    h.drop_logs();
    let before = h.list(1).into_iter().find(|r| r["resource"] == uri).expect("listed")["title"].clone();
    h.dispatch(1, &uri, 7, json!({"type": "session/titleChanged", "title": "x".repeat(17)}));
    h.settle_no_repo();
    let echo = h.frames(1).into_iter().find(|f| f["params"]["origin"]["clientSeq"] == 7).expect("an echo");
    let reason = echo["params"]["rejectionReason"].as_str().unwrap_or("");
    assert!(reason.contains("title") && reason.contains("16 bytes") && reason.contains("title_max_bytes"), "{reason}");
    assert!(h.frames(2).is_empty(), "nothing broadcast");
    assert!(h.store_ops().is_empty(), "nothing written");
    assert_eq!(h.list(1).into_iter().find(|r| r["resource"] == uri).expect("listed")["title"], before);
    // At the cap: taken.
    h.dispatch(1, &uri, 8, json!({"type": "session/titleChanged", "title": "y".repeat(16)}));
    h.settle_no_repo();
    assert_eq!(h.list(1).into_iter().find(|r| r["resource"] == uri).expect("listed")["title"], "y".repeat(16));
}

/// Issue 25: `createChat` with a first message over a cap (its text, or its
/// attachments as JSON) is refused with -32602 naming the field and the
/// cap, before the chat is made.
#[test]
fn a_first_message_over_its_cap_is_refused_before_the_chat_is_made() {
    let mut h = limited(Limits { message_text_max_bytes: 10, message_attachments_max_bytes: 64, ..Limits::default() });
    h.connect(1, "c");
    let (uri, _) = h.session_with_turn("s");
    h.settle_no_repo();
    let message = |text: &str, attachments: serde_json::Value| json!({"text": text, "origin": {"kind": "user"}, "attachments": attachments});
    let cases = [
        ("ahp-chat:/long", message("far more than ten bytes", json!([])), "initialMessage.text"),
        ("ahp-chat:/heavy", message("hi", json!([{"type": "simple", "label": "x".repeat(100)}])), "initialMessage.attachments"),
    ];
    for (chat, m, field) in cases {
        let r = h.request(1, "createChat", json!({"channel": uri, "chat": chat, "initialMessage": m}));
        assert_eq!(r["error"]["code"], -32602, "{r}");
        let text = r["error"]["message"].as_str().unwrap_or("");
        assert!(text.contains(field) && text.contains("limit"), "{text}");
        h.settle_no_repo();
        assert!(h.host.view().sessions.get(&uri).expect("session").record().chats.iter().all(|c| c.resource != chat), "no chat made");
    }
    // The same message in a turn is refused as its echo's reason.
    let chat = "ahp-chat:/ahp-session@s".to_owned();
    h.request(1, "subscribe", json!({"channel": chat}));
    h.frames(1);
    h.dispatch(1, &chat, 9, json!({"type": "chat/turnStarted", "turnId": "t9", "startedAt": "2026-01-01T00:00:00Z",
        "message": {"text": "hi", "origin": {"kind": "user"}, "attachments": [{"type": "simple", "label": "x".repeat(100)}]}}));
    h.settle_no_repo();
    let echo = h.frames(1).into_iter().find(|f| f["params"]["origin"]["clientSeq"] == 9).expect("an echo");
    let reason = echo["params"]["rejectionReason"].as_str().unwrap_or("");
    assert!(reason.contains("message.attachments") && reason.contains("message_attachments_max_bytes"), "{reason}");
}
