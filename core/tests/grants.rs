//! Grants (Sessions page, "Whose it is" and "Grants"): every command and
//! client-dispatched action against every kind of caller. The allowed set
//! is exactly the grants table, and a refusal changes nothing.

use ahpd_core::grants::{token_hash, Membership, Role, User, UsersDirectory};
use ahpd_core::Config;
use ahpd_core::testkit::Harness;
use serde_json::{json, Value};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Caller {
    NoUsersDir,
    Owner,
    OtherMember,
    Guest,
    Administrator,
    Unauthenticated,
}

fn user(id: &str, role: Role, administrator: bool) -> User {
    User {
        id: id.into(),
        token_sha256: token_hash(&format!("token-{id}")),
        role,
        administrator,
        memberships: vec![Membership { team: "t".into(), project: id.into(), primary: true }],
    }
}

fn directory() -> UsersDirectory {
    UsersDirectory {
        users: vec![
            user("owner", Role::Member, false),
            user("other", Role::Member, false),
            user("guest", Role::Guest, false),
            user("admin", Role::Member, true),
        ],
        plugins: Vec::new(),
    }
}

fn login(h: &mut Harness, conn: u64, id: &str) {
    h.connect(conn, &format!("client-{conn}"));
    let r = h.request(conn, "authenticate", json!({"channel": "ahp-root://", "resource": "ahpd", "token": format!("token-{id}")}));
    assert_eq!(r["result"], json!({}), "{r}");
}

/// A host with one announced session owned by `owner` (conn 1), and the
/// caller on conn 2.
fn setup(caller: Caller) -> (Harness, String, String) {
    let users = (caller != Caller::NoUsersDir).then(directory);
    let mut h = Harness::new(Config { users, ..Config::default() });
    if caller == Caller::NoUsersDir {
        h.connect(1, "owner");
    } else {
        login(&mut h, 1, "owner");
    }
    let (uri, chat) = h.create(1, "s");
    h.start_turn(1, &chat, 1, "t1", "hi");
    h.settle_backend();
    h.agent_reply(&chat, "t1", "Echo: hi");
    match caller {
        Caller::NoUsersDir | Caller::Unauthenticated => h.connect(2, "caller"),
        Caller::Owner => login(&mut h, 2, "owner"),
        Caller::OtherMember => login(&mut h, 2, "other"),
        Caller::Guest => login(&mut h, 2, "guest"),
        Caller::Administrator => login(&mut h, 2, "admin"),
    }
    h.frames(2);
    (h, uri, chat)
}

fn snapshot_of(h: &Harness, uri: &str) -> String {
    format!("{:?}", h.host.view().sessions.get(uri).map(|s| (s.record(), s.resident(), s.phase())))
}

fn refused(v: &Value) -> bool {
    v["error"]["code"] == -32009
}

#[test]
fn commands_follow_the_grants_table() {
    use Caller::*;
    for caller in [NoUsersDir, Owner, OtherMember, Guest, Administrator, Unauthenticated] {
        let can_read = caller != Unauthenticated;
        let can_write = matches!(caller, NoUsersDir | Owner | OtherMember | Administrator);
        let can_dispose = matches!(caller, NoUsersDir | Owner | Administrator);

        let (mut h, uri, chat) = setup(caller);
        let before = snapshot_of(&h, &uri);
        let r = h.request(2, "listSessions", json!({"channel": "ahp-root://"}));
        assert_eq!(!refused(&r), can_read, "{caller:?} listSessions {r}");
        let r = h.request(2, "subscribe", json!({"channel": uri}));
        assert_eq!(!refused(&r), can_read, "{caller:?} subscribe {r}");
        let r = h.request(2, "fetchTurns", json!({"channel": chat}));
        assert_eq!(!refused(&r), can_read, "{caller:?} fetchTurns {r}");
        if !can_read {
            assert_eq!(snapshot_of(&h, &uri), before, "a refusal changes nothing");
        }

        let rid = h.send_request(2, "createSession", json!({"channel": "ahp-session:/new", "provider": "echo"}));
        h.settle();
        let r = h.take_reply(2, rid).expect("reply");
        assert_eq!(!refused(&r), can_write, "{caller:?} createSession {r}");
        if !can_write {
            assert!(!h.host.view().sessions.contains_key("ahp-session:/new"), "a refused create leaves nothing");
        }

        let before = snapshot_of(&h, &uri);
        let rid = h.send_request(2, "disposeSession", json!({"channel": uri}));
        h.settle();
        let r = h.take_reply(2, rid).expect("reply");
        assert_eq!(!refused(&r), can_dispose, "{caller:?} disposeSession {r}");
        if caller == OtherMember {
            assert_eq!(r["error"]["message"], "Only the session's owner can delete it.");
        }
        if !can_dispose {
            assert_eq!(snapshot_of(&h, &uri), before, "a refused dispose changes nothing");
        }
    }
}

#[test]
fn actions_follow_the_grants_table() {
    use Caller::*;
    let actions = |chat: &str, uri: &str| -> Vec<(String, Value)> {
        vec![
            (uri.to_owned(), json!({"type": "session/titleChanged", "title": "renamed"})),
            (uri.to_owned(), json!({"type": "session/isReadChanged", "isRead": true})),
            (uri.to_owned(), json!({"type": "session/isArchivedChanged", "isArchived": true})),
            (chat.to_owned(), json!({"type": "chat/draftChanged", "draft": {"text": "d", "origin": {"kind": "user"}}})),
            // A chat's own read bit: `session:mark` (issue 23).
            (chat.to_owned(), json!({"type": "chat/isReadChanged", "isRead": true})),
            (chat.to_owned(), json!({"type": "chat/turnStarted", "turnId": "t9", "startedAt": "2026-01-01T00:00:00Z",
                "message": {"text": "x", "origin": {"kind": "user"}}})),
            // A resume sends: `chat:send` (issue 23). Taken past the grant,
            // it is refused for its turn, not for the caller.
            (chat.to_owned(), json!({"type": "chat/turnResume", "turnId": "t1"})),
        ]
    };
    for caller in [NoUsersDir, Owner, OtherMember, Guest, Administrator, Unauthenticated] {
        let can_write = matches!(caller, NoUsersDir | Owner | OtherMember | Administrator);
        let (probe, uri, chat) = setup(caller);
        drop(probe);
        for (i, (channel, action)) in actions(&chat, &uri).into_iter().enumerate() {
            let (mut h, _, _) = setup(caller);
            h.request(2, "subscribe", json!({"channel": channel}));
            h.frames(2);
            let before = snapshot_of(&h, &uri);
            h.dispatch(2, &channel, i as i64 + 1, action.clone());
            h.settle();
            let echoes = h.frames(2);
            let echo = echoes.iter().find(|f| f["params"]["action"]["type"] == action["type"]).cloned().unwrap_or(Value::Null);
            let reason = echo["params"]["rejectionReason"].as_str().unwrap_or("").to_owned();
            let denied = reason.contains("permission denied") || reason.contains("authenticate first");
            assert_eq!(!denied, can_write, "{caller:?} {} → {reason:?}", action["type"]);
            if denied {
                assert_eq!(snapshot_of(&h, &uri), before, "{caller:?}: a refused action changes nothing");
            }
        }
    }
}

#[test]
fn the_owner_filter_applies_before_the_limit() {
    let mut h = Harness::new(Config { users: Some(directory()), ..Config::default() });
    login(&mut h, 1, "owner");
    login(&mut h, 2, "other");
    for (conn, id) in [(1, "a"), (2, "b"), (1, "c"), (2, "d")] {
        let (_, chat) = h.create(conn, id);
        h.start_turn(conn, &chat, 1, "t", "hi");
        h.settle();
    }
    let mine = h.request(1, "listSessions", json!({"channel": "ahp-root://", "limit": 1, "_meta": {"ahpd.owner": "me"}}));
    let items = mine["result"]["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(items.len(), 1);
    let next = mine["result"]["nextCursor"].as_str().expect("a second page of mine").to_owned();
    let page2 = h.request(1, "listSessions", json!({"channel": "ahp-root://", "limit": 1, "cursor": next, "_meta": {"ahpd.owner": "me"}}));
    let mut uris: Vec<String> = items.iter().chain(page2["result"]["items"].as_array().into_iter().flatten())
        .map(|r| r["resource"].as_str().unwrap_or("").to_owned()).collect();
    uris.sort();
    assert_eq!(uris, ["ahp-session:/a", "ahp-session:/c"]);
    assert!(page2["result"]["nextCursor"].is_null());
    h.connect(3, "anon");
    let none = h.request(3, "listSessions", json!({"channel": "ahp-root://", "_meta": {"ahpd.owner": "me"}}));
    assert!(refused(&none), "a connection with no principal on a users host holds no session:list");
    let bad = h.request(1, "listSessions", json!({"channel": "ahp-root://", "_meta": {"ahpd.owner": "you"}}));
    assert_eq!(bad["error"]["code"], -32602);
    let wrong = h.request(3, "authenticate", json!({"channel": "ahp-root://", "resource": "ahpd", "token": "nope"}));
    assert_eq!(wrong["error"]["code"], -32602);
}

#[test]
fn with_no_users_directory_the_owner_filter_answers_no_rows() {
    let mut h = Harness::new(Config::default());
    h.connect(1, "c");
    let (_, chat) = h.create(1, "a");
    h.start_turn(1, &chat, 1, "t", "hi");
    h.settle();
    let r = h.request(1, "listSessions", json!({"channel": "ahp-root://", "_meta": {"ahpd.owner": "me"}}));
    assert_eq!(r["result"]["items"], json!([]));
    assert_eq!(h.list(1).len(), 1);
}

#[test]
fn a_policy_that_forbids_a_provider_refuses_that_user_and_leaves_nothing() {
    use ahpd_core::policy::{Effect, Policy, Rule};
    let policy = Policy { rules: vec![Rule { who: "user:guest".into(), providers: vec![], folders: vec![], effect: Effect::Deny },
        Rule { who: "user:other".into(), providers: vec!["echo".into()], folders: vec![], effect: Effect::Deny }] };
    let mut h = Harness::new(Config { users: Some(directory()), policy, ..Config::default() });
    login(&mut h, 1, "other");
    login(&mut h, 2, "owner");
    let r = h.request(1, "createSession", json!({"channel": "ahp-session:/p1", "provider": "echo"}));
    assert_eq!(r["error"]["code"], -32009);
    assert!(r["error"]["message"].as_str().unwrap_or("").contains("policy"));
    assert!(h.host.view().sessions.is_empty() && h.store_ops().is_empty() && h.backend_cmds().is_empty());
    let (uri, _) = h.create(2, "p1");
    assert!(h.host.view().sessions.contains_key(&uri), "another user's create succeeds");
    // A reloaded policy applies to the next create.
    h.input(ahpd_core::Input::PolicyChanged(Policy::default()));
    let rid = h.send_request(1, "createSession", json!({"channel": "ahp-session:/p2", "provider": "echo"}));
    h.settle();
    assert_eq!(h.take_reply(1, rid).expect("reply")["result"], Value::Null);
}
