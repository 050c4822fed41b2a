//! Principals besides users (issue 7): `root:<host>` for a connection that
//! is this host itself (it presents the host's own token) and
//! `plugin:<name>` for the users directory's plugins. Neither records a
//! scope; root holds every grant and may delete any session.

use ahpd_core::grants::{token_hash, Membership, Plugin, Role, User, UsersDirectory};
use ahpd_core::Config;
use ahpd_core::testkit::Harness;
use serde_json::{json, Value};

fn config() -> Config {
    Config {
        host_name: "box".into(),
        host_token_sha256: Some(token_hash("host-secret")),
        users: Some(UsersDirectory {
            users: vec![User {
                id: "alice".into(),
                token_sha256: token_hash("token-alice"),
                role: Role::Member,
                administrator: false,
                memberships: vec![Membership { team: "t".into(), project: "p".into(), primary: true }],
            }],
            plugins: vec![
                Plugin { name: "bot".into(), token_sha256: token_hash("token-bot"), role: Role::Member },
                Plugin { name: "watcher".into(), token_sha256: token_hash("token-watcher"), role: Role::Guest },
            ],
        }),
        ..Config::default()
    }
}

fn login(h: &mut Harness, conn: u64, token: &str) -> Value {
    h.connect(conn, &format!("client-{conn}"));
    h.request(conn, "authenticate", json!({"channel": "ahp-root://", "resource": "ahpd", "token": token}))
}

fn owner_and_scope(h: &Harness, uri: &str) -> (Option<String>, Option<String>) {
    let r = &h.host.view().sessions.get(uri).expect("the session is held").record();
    (r.owner.as_deref().map(String::from), r.scope.as_deref().map(String::from))
}

#[test]
fn root_plugins_and_users_are_told_apart_and_only_users_record_a_scope() {
    let mut h = Harness::new(config());
    assert_eq!(login(&mut h, 1, "host-secret")["result"], json!({}));
    assert_eq!(login(&mut h, 2, "token-alice")["result"], json!({}));
    assert_eq!(login(&mut h, 3, "token-bot")["result"], json!({}));
    assert_eq!(login(&mut h, 4, "token-watcher")["result"], json!({}));
    let logs: Vec<String> = h.pending.iter().filter_map(|e| match e {
        ahpd_core::Effect::Log(l) if l.event == "client.authenticated" => Some(l.detail.clone()),
        _ => None,
    }).collect();
    assert!(logs.iter().any(|l| l.ends_with("is root:box")), "{logs:?}");
    assert!(logs.iter().any(|l| l.ends_with("is plugin:bot")), "{logs:?}");
    assert!(logs.iter().all(|l| !l.contains("secret") && !l.contains("token-")), "no token in the log: {logs:?}");

    let (root_s, root_chat) = h.create(1, "by-root");
    h.start_turn(1, &root_chat, 1, "t1", "hello");
    h.settle();
    let (alice_s, alice_chat) = h.create(2, "by-alice");
    h.start_turn(2, &alice_chat, 1, "t1", "hello");
    h.settle();
    let (bot_s, _) = h.create(3, "by-bot");
    assert_eq!(owner_and_scope(&h, &root_s), (Some("root:box".into()), None), "a root connection records no scope");
    assert_eq!(owner_and_scope(&h, &alice_s), (Some("user:alice".into()), Some("t/p".into())));
    assert_eq!(owner_and_scope(&h, &bot_s), (Some("plugin:bot".into()), None), "a plugin records no scope");
    // Asking for a scope does not give root one: it has no memberships.
    let id = h.send_request(1, "createSession", json!({"channel": "ahp-session:/scoped", "provider": "echo", "config": {"scope": "t/p"}}));
    h.settle_backend();
    assert_eq!(h.take_reply(1, id).expect("createSession answered")["result"], Value::Null);
    assert_eq!(owner_and_scope(&h, "ahp-session:/scoped"), (Some("root:box".into()), None));

    // A guest plugin reads and may do nothing else.
    let r = h.request(4, "createSession", json!({"channel": "ahp-session:/by-watcher", "provider": "echo"}));
    assert_eq!(r["error"]["code"], -32009, "{r}");
    assert!(h.request(4, "listSessions", json!({"channel": "ahp-root://"}))["result"].is_object());

    // A member plugin may not delete a user's session; the host itself may.
    let r = h.request(3, "disposeSession", json!({"channel": alice_s}));
    assert_eq!(r["error"]["code"], -32009, "{r}");
    assert_eq!(r["error"]["message"], "Only the session's owner can delete it.");
    let id = h.send_request(1, "disposeSession", json!({"channel": alice_s}));
    h.settle();
    assert_eq!(h.take_reply(1, id).expect("dispose answered")["result"], Value::Null);
    assert!(!h.host.view().sessions.contains_key(&alice_s));

    // "Mine" for root is what root made.
    let mine = h.request(1, "listSessions", json!({"channel": "ahp-root://", "_meta": {"ahpd.owner": "me"}}));
    let rows: Vec<&str> = mine["result"]["items"].as_array().into_iter().flatten().filter_map(|r| r["resource"].as_str()).collect();
    assert_eq!(rows, vec![root_s.as_str()], "only root's announced session");
}

#[test]
fn without_a_host_token_configured_nobody_is_root() {
    let mut h = Harness::new(Config { host_token_sha256: None, ..config() });
    let r = login(&mut h, 1, "host-secret");
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let mut h = Harness::new(config());
    let r = login(&mut h, 1, "host-secret-but-not-quite");
    assert_eq!(r["error"]["code"], -32602, "{r}");
}
