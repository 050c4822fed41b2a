//! Failures the simulator found, frozen as handwritten scenarios (style
//! guide 3.8: seeds are stable only per commit, so each is replayed here by
//! hand), each with a short postmortem. They drive the core directly with
//! JSON frames and answer its commands by hand.

use ahpd_core::config::Config;
use ahpd_core::{BackendCmd, BackendEvent, ConnId, Effect, Host, Input, MonoTime, Now, OpId, Outbound, Outcome, StoreCmd, WallTime};
use serde_json::{json, Value};

const SESSION: &str = "ahp-session:/s1";
const CHAT: &str = "ahp-chat:/ahp-session@s1";

/// A hand-cranked host: every input checks the core's state rules.
struct Driver {
    host: Host,
    now: Now,
    effects: Vec<Effect>,
    next_id: u64,
    client_seq: i64,
}

impl Driver {
    fn new(config: Config) -> Driver {
        let now = Now { mono: MonoTime(0), wall: WallTime(1_767_225_600_000) };
        Driver { host: Host::new(config, 7, Vec::new(), now), now, effects: Vec::new(), next_id: 0, client_seq: 0 }
    }

    fn input(&mut self, input: Input) {
        self.now.mono = self.now.mono.plus_ms(1);
        self.now.wall = WallTime(self.now.wall.0 + 1);
        let before = ahpd_core::invariants::before(&self.host.view());
        let effects = self.host.handle(self.now, input);
        let view = self.host.view();
        if let Err(v) = ahpd_core::invariants::check_all(&view).and_then(|()| ahpd_core::invariants::check_step(&before, &view)) {
            panic!("{}: {}", v.rule, v.detail);
        }
        self.effects.extend(effects);
    }

    fn connect(&mut self, conn: u64, client: &str) {
        self.input(Input::Connected { conn: ConnId(conn) });
        self.request(conn, "initialize", json!({"channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": client}));
    }

    /// Sends a request; returns its id.
    fn request(&mut self, conn: u64, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let text = json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}).to_string();
        self.input(Input::Frame { conn: ConnId(conn), text });
        self.next_id
    }

    fn dispatch(&mut self, conn: u64, channel: &str, action: Value) {
        self.client_seq += 1;
        let text = json!({"jsonrpc": "2.0", "method": "dispatchAction",
            "params": {"channel": channel, "clientSeq": self.client_seq, "action": action}})
        .to_string();
        self.input(Input::Frame { conn: ConnId(conn), text });
    }

    /// Takes the reply to request `id`, if it was sent.
    fn reply(&mut self, id: u64) -> Option<Value> {
        let pos = self.effects.iter().position(|e| {
            matches!(e, Effect::Send { message: Outbound::Result { id: i, .. } | Outbound::Error { id: Some(i), .. }, .. } if *i == id)
        })?;
        match self.effects.remove(pos) {
            Effect::Send { message, .. } => serde_json::from_str(&message.to_json()).ok(),
            _ => None,
        }
    }

    fn backend(&mut self) -> Vec<(OpId, BackendCmd)> {
        let mut out = Vec::new();
        self.effects.retain(|e| match e {
            Effect::Backend { op, command, .. } => {
                out.push((*op, command.clone()));
                false
            }
            _ => true,
        });
        out
    }

    fn store(&mut self) -> Vec<(OpId, StoreCmd)> {
        let mut out = Vec::new();
        self.effects.retain(|e| match e {
            Effect::Store { op, command } => {
                out.push((*op, command.clone()));
                false
            }
            _ => true,
        });
        out
    }

    /// Answers every backend command like a working agent and every store
    /// write with Ok, until none is left.
    fn settle(&mut self) {
        loop {
            let backend = self.backend();
            let store = self.store();
            if backend.is_empty() && store.is_empty() {
                return;
            }
            for (op, cmd) in backend {
                let outcome = match cmd {
                    BackendCmd::Start { conversation_id, .. } => Outcome::Started { conversation_id, history: Vec::new() },
                    _ => Outcome::Ok,
                };
                self.input(Input::Done { op, outcome });
            }
            for (op, _) in store {
                self.input(Input::Done { op, outcome: Outcome::Ok });
            }
        }
    }

    fn agent(&mut self, action: Value) {
        let action = serde_json::from_value(action).expect("an action");
        self.input(Input::Backend { chat: CHAT.to_owned(), event: BackendEvent::Action(action) });
    }

    /// A session with one turn running in its default chat, its send
    /// acknowledged (so the session is announced).
    fn session_with_running_turn(&mut self, conn: u64) {
        self.request(conn, "createSession", json!({"channel": SESSION, "provider": "echo"}));
        self.settle();
        self.dispatch(conn, CHAT, json!({"type": "chat/turnStarted", "turnId": "t1",
            "startedAt": "2026-01-01T00:00:00.000Z", "message": {"text": "hello", "origin": {"kind": "user"}}}));
        self.settle();
        assert!(self.host.view().sessions.get(SESSION).expect("the session is held").is_announced());
    }
}

/// Seed 253 (rule5_restart_keeps_acked). A client marked a session read;
/// its write was parked (write-ahead) with the in-memory record keeping the
/// old bit until durable. A turn ended meanwhile and wrote the in-memory
/// record: that later write carried `isRead: false` and landed after the
/// parked one, so the disk lost a change the client had been told was
/// saved, and a restart brought the session back unread. Fix: a record
/// write asked for while a parked write is in flight is owed and issued
/// once the parked write settles (`Session::put_owed`).
#[test]
fn a_record_write_never_lands_after_a_parked_change_with_stale_bits() {
    let mut d = Driver::new(Config::default());
    d.connect(1, "a");
    d.session_with_running_turn(1);
    d.dispatch(1, SESSION, json!({"type": "session/isReadChanged", "isRead": true}));
    let parked = d.store();
    assert_eq!(parked.len(), 1, "the change is written first");
    d.agent(json!({"type": "chat/turnComplete", "turnId": "t1", "duration": 0}));
    // Whatever is written before the parked write is answered must carry
    // the change, or be held back.
    for (_, cmd) in d.store() {
        if let StoreCmd::Put { record } = cmd {
            assert!(record.is_read, "a stale record write was issued behind the parked change");
        }
    }
    d.input(Input::Done { op: parked[0].0, outcome: Outcome::Ok });
    let later = d.store();
    assert!(!later.is_empty(), "the held-back write is issued once the parked one settles");
    for (_, cmd) in later {
        if let StoreCmd::Put { record } = cmd {
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
    let mut d = Driver::new(Config::default());
    d.connect(1, "a");
    d.session_with_running_turn(1);
    d.dispatch(1, SESSION, json!({"type": "session/titleChanged", "title": "x"}));
    let parked = d.store();
    let first = d.request(1, "createChat", json!({"channel": SESSION, "chat": "ahp-chat:/c1"}));
    let second = d.request(1, "createChat", json!({"channel": SESSION, "chat": "ahp-chat:/c2"}));
    d.input(Input::Done { op: parked[0].0, outcome: Outcome::Ok });
    d.settle();
    let a = d.reply(first).expect("first createChat answered");
    let b = d.reply(second).expect("second createChat answered");
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
    let mut d = Driver::new(Config::default());
    d.connect(1, "a");
    d.session_with_running_turn(1);
    d.request(1, "subscribe", json!({"channel": CHAT}));
    d.request(1, "subscribe", json!({"channel": "ahp-root://"}));
    d.agent(json!({"type": "chat/turnComplete", "turnId": "t1", "duration": 0}));
    d.settle();
    let dispose = d.request(1, "disposeSession", json!({"channel": SESSION}));
    d.settle();
    assert!(d.reply(dispose).is_some_and(|r| r["error"].is_null()));
    d.request(1, "createSession", json!({"channel": SESSION, "provider": "echo"}));
    d.settle();
    let last_seen = d.host.view().server_seq;
    d.input(Input::Disconnected { conn: ConnId(1) });
    d.input(Input::Connected { conn: ConnId(2) });
    let id = d.request(2, "reconnect", json!({"channel": "ahp-root://", "clientId": "a",
        "lastSeenServerSeq": last_seen, "subscriptions": [CHAT, "ahp-root://"]}));
    let reply = d.reply(id).expect("reconnect answered");
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
    let mut d = Driver::new(Config::default());
    d.connect(1, "a");
    d.session_with_running_turn(1);
    d.input(Input::Backend { chat: CHAT.to_owned(), event: BackendEvent::Busy(true) });
    let id = d.request(1, "disposeSession", json!({"channel": SESSION}));
    for (op, _) in d.backend() {
        d.input(Input::Done { op, outcome: Outcome::Ok });
    }
    for (op, _) in d.store() {
        d.input(Input::Done { op, outcome: Outcome::Failed { message: "EIO".to_owned() } });
    }
    assert!(d.reply(id).is_some_and(|r| r["error"]["code"] == -32603));
    let view = d.host.view();
    let s = view.sessions.get(SESSION).expect("the session is held");
    assert_eq!(s.phase.name(), "asleep");
    assert!(!s.is_busy() && s.sends_in_flight.is_empty() && !s.has_active_turn());
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
    let mut d = Driver::new(Config { users: Some(UsersDirectory { users: vec![bob], plugins: Vec::new() }), ..Config::default() });
    d.connect(1, "a");
    let auth = d.request(1, "authenticate", json!({"channel": "ahp-root://", "resource": "ahpd", "token": "token-bob"}));
    assert!(d.reply(auth).is_some_and(|r| r["error"].is_null()));
    d.request(1, "createSession", json!({"channel": SESSION, "provider": "echo", "workingDirectories": ["file:///work/a"]}));
    let git: Vec<_> = d.effects.iter().filter_map(|e| match e {
        Effect::Git { op, command } => Some((*op, command.clone())),
        _ => None,
    }).collect();
    assert_eq!(git.len(), 1, "the folder is read first");
    d.input(Input::Disconnected { conn: ConnId(1) });
    let (op, command) = git[0].clone();
    d.input(Input::Done { op, outcome: Outcome::Git(command.no_repo_answer()) });
    assert!(d.host.view().sessions.get(SESSION).is_none(), "a session was made for a connection that is gone");
    assert!(d.backend().is_empty(), "no agent is started for it");
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
    let mut d = Driver::new(Config::default());
    d.connect(1, "a");
    d.session_with_running_turn(1);
    let other = "ahp-chat:/c1";
    let made = d.request(1, "createChat", json!({"channel": SESSION, "chat": other}));
    d.settle();
    assert!(d.reply(made).is_some_and(|r| r["error"].is_null()));
    d.dispatch(1, other, json!({"type": "chat/turnStarted", "turnId": "t2",
        "startedAt": "2026-01-01T00:00:00.000Z", "message": {"text": "there", "origin": {"kind": "user"}}}));
    d.settle();
    d.input(Input::Backend { chat: CHAT.to_owned(), event: BackendEvent::Exited { message: "killed".to_owned() } });
    let view = d.host.view();
    let s = view.sessions.get(SESSION).expect("the session is held");
    assert_eq!(s.phase.name(), "asleep");
    let running: Vec<_> = s.resident.iter().flat_map(|r| r.chats.iter()).filter(|(_, c)| c.active_turn.is_some()).map(|(u, _)| u.clone()).collect();
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
    let mut d = Driver::new(Config::default());
    d.connect(1, "a");
    let id = d.request(1, "createSession", json!({"channel": SESSION, "provider": "echo",
        "config": {"sessionAwareness": "coordinate", "autoApprove": true}}));
    d.settle();
    assert!(d.reply(id).is_some_and(|r| r["error"].is_null()));
    let record = d.host.view().sessions.get(SESSION).expect("the session is held").record.clone();
    assert_eq!(Tier::of_config(&record.config), Tier::Coordinate);
    let restarted = Host::new(Config::default(), 8, vec![record], d.now);
    let view = restarted.view();
    let back = &view.sessions.get(SESSION).expect("the session is restored").record;
    assert_eq!(Tier::of_config(&back.config), Tier::Coordinate, "{:?}", back.config);
    assert!(auto_approve(&back.config));
}
