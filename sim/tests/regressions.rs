//! Failures the simulator found, frozen as handwritten scenarios (style
//! guide 3.8: seeds are stable only per commit, so each is replayed here by
//! hand), each with a short postmortem. They drive the core with JSON
//! frames through its one test driver (`ahpd_core::testkit`) and answer
//! its commands by hand.

use ahpd_core::config::Config;
use ahpd_core::testkit::Harness;
use ahpd_core::{BackendEvent, ConnId, Effect, Host, Input, Outcome, StoreCmd};
use serde_json::{json, Value};

const SESSION: &str = "ahp-session:/s1";
const CHAT: &str = "ahp-chat:/ahp-session@s1";

/// The core's one test driver as these scenarios ran it: its own seed,
/// both clocks a millisecond on at every input, every input checked
/// against the core's state rules.
fn driver(config: Config) -> Harness {
    let mut h = Harness::with_seed(config, 7);
    h.step_ms = 1;
    h
}

/// Connects `conn` as `client` and initializes it.
fn connect(h: &mut Harness, conn: u64, client: &str) {
    h.input(Input::Connected { conn: ConnId(conn) });
    h.send_request(conn, "initialize", json!({"channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": client}));
}

/// The default chat's agent says `action`.
fn agent(h: &mut Harness, action: Value) {
    let action = serde_json::from_value(action).expect("an action");
    h.input(Input::Backend { chat: CHAT.to_owned(), event: BackendEvent::Action(action) });
}

/// A session with one turn running in its default chat, its send
/// acknowledged (so the session is announced).
fn session_with_running_turn(h: &mut Harness, conn: u64) {
    h.send_request(conn, "createSession", json!({"channel": SESSION, "provider": "echo"}));
    h.settle();
    h.dispatch_next(conn, CHAT, json!({"type": "chat/turnStarted", "turnId": "t1",
        "startedAt": "2026-01-01T00:00:00.000Z", "message": {"text": "hello", "origin": {"kind": "user"}}}));
    h.settle();
    assert!(h.host.view().sessions.get(SESSION).expect("the session is held").is_announced());
}

/// Seed 253 (rule5_restart_keeps_acked). A client marked a session read;
/// its write was parked (write-ahead) with the in-memory record keeping the
/// old bit until durable. A turn ended meanwhile and wrote the in-memory
/// record: that later write carried `isRead: false` and landed after the
/// parked one, so the disk lost a change the client had been told was
/// saved, and a restart brought the session back unread. Fix: a record
/// write asked for while a parked write is in flight is owed and issued
/// once the parked write settles (`Work::put_owed`).
#[test]
fn a_record_write_never_lands_after_a_parked_change_with_stale_bits() {
    let mut d = driver(Config::default());
    connect(&mut d, 1, "a");
    session_with_running_turn(&mut d, 1);
    d.dispatch_next(1, SESSION, json!({"type": "session/isReadChanged", "isRead": true}));
    let parked = d.store_ops();
    assert_eq!(parked.len(), 1, "the change is written first");
    agent(&mut d, json!({"type": "chat/turnComplete", "turnId": "t1", "duration": 0}));
    // Whatever is written before the parked write is answered must carry
    // the change, or be held back.
    for (_, cmd) in d.store_ops() {
        if let StoreCmd::Put { record, .. } = cmd {
            assert!(record.is_read, "a stale record write was issued behind the parked change");
        }
    }
    d.input(Input::Done { op: parked[0].0, outcome: Outcome::Ok });
    let later = d.store_ops();
    assert!(!later.is_empty(), "the held-back write is issued once the parked one settles");
    for (_, cmd) in later {
        if let StoreCmd::Put { record, .. } = cmd {
            assert!(record.is_read);
        }
    }
}

/// Seed 80 (a hang). Commands queued behind a parked write (`createChat`)
/// were re-run by `drain_inbox`, saw the rest of the inbox still queued,
/// and queued themselves again at the back: out of order, and for ever
/// once only commands remained. Fix: a drained command runs as though
/// nothing waited behind it.
#[test]
fn queued_commands_drain_in_order_and_end() {
    let mut d = driver(Config::default());
    connect(&mut d, 1, "a");
    session_with_running_turn(&mut d, 1);
    d.dispatch_next(1, SESSION, json!({"type": "session/titleChanged", "title": "x"}));
    let parked = d.store_ops();
    let first = d.send_request(1, "createChat", json!({"channel": SESSION, "chat": "ahp-chat:/c1"}));
    let second = d.send_request(1, "createChat", json!({"channel": SESSION, "chat": "ahp-chat:/c2"}));
    d.input(Input::Done { op: parked[0].0, outcome: Outcome::Ok });
    d.settle();
    let a = d.take_reply(1, first).expect("first createChat answered");
    let b = d.take_reply(1, second).expect("second createChat answered");
    assert!(a["error"].is_null() && b["error"].is_null(), "{a} {b}");
}

/// Seeds 0, 4, 24, 41. A client held a mirror of a session's chat; the
/// session was disposed (its subscriptions ended without a word on the
/// channel) and made anew under the same URI; the client, still hearing
/// envelopes on other channels, reconnected with a high
/// `lastSeenServerSeq` and was answered with a replay onto the old
/// incarnation's state. Fix: `reconnect` answers with snapshots when a
/// listed channel was retired in this process (`Host::retired`), was
/// rebuilt after the client last heard (`Resident::born_seq`), or is not
/// held.
#[test]
fn reconnect_does_not_replay_onto_a_disposed_and_recreated_session() {
    let mut d = driver(Config::default());
    connect(&mut d, 1, "a");
    session_with_running_turn(&mut d, 1);
    d.send_request(1, "subscribe", json!({"channel": CHAT}));
    d.send_request(1, "subscribe", json!({"channel": "ahp-root://"}));
    agent(&mut d, json!({"type": "chat/turnComplete", "turnId": "t1", "duration": 0}));
    d.settle();
    let dispose = d.send_request(1, "disposeSession", json!({"channel": SESSION}));
    d.settle();
    assert!(d.take_reply(1, dispose).is_some_and(|r| r["error"].is_null()));
    d.send_request(1, "createSession", json!({"channel": SESSION, "provider": "echo"}));
    d.settle();
    let last_seen = d.host.view().server_seq;
    d.input(Input::Disconnected { conn: ConnId(1) });
    d.input(Input::Connected { conn: ConnId(2) });
    let id = d.send_request(2, "reconnect", json!({"channel": "ahp-root://", "clientId": "a",
        "lastSeenServerSeq": last_seen, "subscriptions": [CHAT, "ahp-root://"]}));
    let reply = d.take_reply(2, id).expect("reconnect answered");
    assert_eq!(reply["result"]["type"], "snapshot", "{reply}");
}

/// Seeds 17, 50, 73. `disposeSession` tore the agents down, then the store
/// could not drop the record: the session went back to `asleep` by a direct
/// assignment (an edge missing from the lifecycle table) and kept its
/// background work, unacknowledged sends and running turn, so a session
/// "slept with work in hand" for ever. Fix: the edge is in the table, and a
/// failed dispose clears what the agents took with them and fails the
/// running turns.
#[test]
fn a_dispose_the_store_refuses_leaves_the_session_asleep_with_nothing_running() {
    let mut d = driver(Config::default());
    connect(&mut d, 1, "a");
    session_with_running_turn(&mut d, 1);
    d.input(Input::Backend { chat: CHAT.to_owned(), event: BackendEvent::Busy(true) });
    let id = d.send_request(1, "disposeSession", json!({"channel": SESSION}));
    for (op, _, _) in d.backend_cmds() {
        d.input(Input::Done { op, outcome: Outcome::Ok });
    }
    for (op, _) in d.store_ops() {
        d.input(Input::Done { op, outcome: Outcome::Failed { message: "EIO".to_owned() } });
    }
    assert!(d.take_reply(1, id).is_some_and(|r| r["error"]["code"] == -32603));
    let view = d.host.view();
    let s = view.sessions.get(SESSION).expect("the session is held");
    assert_eq!(s.phase().name(), "asleep");
    assert!(!s.is_busy() && s.work().sends_in_flight.is_empty() && !s.has_active_turn());
}

/// Seeds 110, 194, 247, 346 of issue 18's users option
/// (`owner_never_changes`). A `createSession` in a folder waits for the
/// folder's repository facts; its connection closed meanwhile, and when
/// the facts came the session was made anyway, with the owner of a
/// connection that no longer existed: none, on a host with a users
/// directory (nobody but an administrator could delete it, and it was
/// charged to nobody). Fix: a create whose connection is gone when its
/// facts come makes nothing (`Host::create_with_facts`); nobody is left to
/// answer.
#[test]
fn a_create_whose_connection_left_while_its_folder_was_read_makes_nothing() {
    use ahpd_core::grants::{token_hash, Membership, Role, User, UsersDirectory};
    let bob = User {
        id: "bob".into(),
        token_sha256: token_hash("token-bob"),
        role: Role::Member,
        administrator: false,
        memberships: vec![Membership { team: "ops".into(), project: "infra".into(), primary: true }],
    };
    let mut d = driver(Config { users: Some(UsersDirectory { users: vec![bob], plugins: Vec::new() }), ..Config::default() });
    connect(&mut d, 1, "a");
    let auth = d.send_request(1, "authenticate", json!({"channel": "ahp-root://", "resource": "ahpd", "token": "token-bob"}));
    assert!(d.take_reply(1, auth).is_some_and(|r| r["error"].is_null()));
    d.send_request(1, "createSession", json!({"channel": SESSION, "provider": "echo", "workingDirectories": ["file:///work/a"]}));
    let git: Vec<_> = d.pending.iter().filter_map(|e| match e {
        Effect::Git { op, command } => Some((*op, command.clone())),
        _ => None,
    }).collect();
    assert_eq!(git.len(), 1, "the folder is read first");
    d.input(Input::Disconnected { conn: ConnId(1) });
    let (op, command) = git[0].clone();
    d.input(Input::Done { op, outcome: Outcome::Git(command.no_repo_answer()) });
    assert!(d.host.view().sessions.get(SESSION).is_none(), "a session was made for a connection that is gone");
    assert!(d.backend_cmds().is_empty(), "no agent is started for it");
}

/// Seeds 106, 256 of issue 18 (`no_sleep_while_busy`). The agent of one
/// chat exited; the host failed that chat's turn, closed the other chats'
/// agents and put the session to sleep, leaving a turn running in another
/// chat: an asleep session with a turn in hand, whose agent was gone, that
/// no event would ever end. Fix: when the session goes to sleep on an
/// exit, the other chats' running turns fail too ("A session sleeps with
/// nothing running").
#[test]
fn an_agent_exit_leaves_no_turn_running_in_another_chat() {
    let mut d = driver(Config::default());
    connect(&mut d, 1, "a");
    session_with_running_turn(&mut d, 1);
    let other = "ahp-chat:/c1";
    let made = d.send_request(1, "createChat", json!({"channel": SESSION, "chat": other}));
    d.settle();
    assert!(d.take_reply(1, made).is_some_and(|r| r["error"].is_null()));
    d.dispatch_next(1, other, json!({"type": "chat/turnStarted", "turnId": "t2",
        "startedAt": "2026-01-01T00:00:00.000Z", "message": {"text": "there", "origin": {"kind": "user"}}}));
    d.settle();
    d.input(Input::Backend { chat: CHAT.to_owned(), event: BackendEvent::Exited { message: "killed".to_owned() } });
    let view = d.host.view();
    let s = view.sessions.get(SESSION).expect("the session is held");
    assert_eq!(s.phase().name(), "asleep");
    let running: Vec<_> = s.resident().iter().flat_map(|r| r.chats.iter()).filter(|(_, c)| c.active_turn.is_some()).map(|(u, _)| u.clone()).collect();
    assert!(running.is_empty(), "turns left running on an asleep session: {running:?}");
}

/// Seeds 6, 9, 11, 17, 25 and most with host crashes, once awareness ran
/// in the sim (`awareness_tier_stable`). A session made with
/// `sessionAwareness: coordinate` (or `passive`, or `autoApprove`) came
/// back from a restart at the default `warn` tier: reading the record
/// back dropped every key neither the table nor the backend offers, and
/// the awareness keys are the host's own, offered by neither, so a
/// coordinate session's conflicting writes were no longer held after a
/// crash. Fix: `restore_values` keeps `awareness::HOST_KEYS`.
#[test]
fn a_session_keeps_its_awareness_tier_across_a_restart() {
    use ahpd_core::awareness::{auto_approve, Tier};
    let mut d = driver(Config::default());
    connect(&mut d, 1, "a");
    let id = d.send_request(1, "createSession", json!({"channel": SESSION, "provider": "echo",
        "config": {"sessionAwareness": "coordinate", "autoApprove": true}}));
    d.settle();
    assert!(d.take_reply(1, id).is_some_and(|r| r["error"].is_null()));
    let record = d.host.view().sessions.get(SESSION).expect("the session is held").record().clone();
    assert_eq!(Tier::of_config(&record.config), Tier::Coordinate);
    let restarted = Host::new(Config::default(), 8, vec![record], d.now);
    let view = restarted.view();
    let back = &view.sessions.get(SESSION).expect("the session is restored").record();
    assert_eq!(Tier::of_config(&back.config), Tier::Coordinate, "{:?}", back.config);
    assert!(auto_approve(&back.config));
}
