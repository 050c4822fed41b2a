//! The one hand-cranked driver of the core for tests (issue 20: "one test
//! driver"): JSON frames in, effects out, a clock moved by hand, helpers
//! that answer the host's commands as a working agent, store and git
//! would, and every state rule of [`crate::invariants`] checked after
//! every input. The core's scenario tests, the simulator's regression
//! scenarios and the `host_frames` fuzz target all drive the host through
//! it. Built only with the `testkit` feature (a dev-dependency feature):
//! the daemon never carries it.

use ahp_types::actions::{
    ChatDeltaAction, ChatResponsePartAction, ChatTurnCompleteAction, StateAction,
};
use ahp_types::state::{MarkdownResponsePart, ResponsePart};
use serde_json::{json, Value};

use crate::git::{GitCmd, GitResult, RepoFacts};
use crate::{BackendCmd, BackendEvent, Config, ConnId, Effect, Host, Input, MonoTime, Now, OpId, Outbound, Outcome, SessionRecord, StoreCmd, WallTime};

/// A users directory of one-team members for tests: each `(id, role)`
/// signs in with the token `token-<id>`, is no administrator, and has one
/// primary membership (team `t`, project `<id>`) (Sessions page, "Whose
/// it is").
pub fn users_directory(users: &[(&str, crate::grants::Role)]) -> crate::grants::UsersDirectory {
    use crate::grants::{token_hash, Membership, User, UsersDirectory};
    let users = users
        .iter()
        .map(|(id, role)| User {
            id: (*id).into(),
            token_sha256: token_hash(&format!("token-{id}")),
            role: *role,
            administrator: false,
            memberships: vec![Membership { team: "t".into(), project: (*id).into(), primary: true }],
        })
        .collect();
    UsersDirectory { users, plugins: Vec::new() }
}

/// The wall clock a [`Harness`] starts at: 2026-01-01T00:00:00Z, in ms
/// since the Unix epoch.
pub const START_WALL_MS: i64 = 1_767_225_600_000;

/// A host driven by hand. Effects pile up in [`Harness::pending`] until a
/// test takes them (a reply, the commands of one kind) or answers them.
/// Panics, naming the rule, when an input breaks a state rule.
#[derive(Debug)]
pub struct Harness {
    /// The host.
    pub host: Host,
    /// The time the next input is handed over at; a test may set it.
    pub now: Now,
    /// Every effect not yet looked at, in order.
    pub pending: Vec<Effect>,
    /// How far both clocks move before each input, in ms (0: only
    /// [`Harness::advance`] and the test move them).
    pub step_ms: u64,
    /// The filesystem `Effect::Fs` runs on ([`Harness::settle_fs`]; issue
    /// 48): empty but for `/` until a test fills it.
    pub fs: crate::files::memfs::MemFs,
    next_id: u64,
    client_seq: i64,
}

impl Harness {
    /// A host with `config`, seed 1 and no records, at [`START_WALL_MS`].
    pub fn new(config: Config) -> Harness {
        Harness::with_records(config, Vec::new())
    }

    /// A host with `config`, random stream `seed` and no records, at
    /// [`START_WALL_MS`].
    pub fn with_seed(config: Config, seed: u64) -> Harness {
        let now = Now { mono: MonoTime(0), wall: WallTime(START_WALL_MS) };
        Harness::built(Host::new(config, seed, Vec::new(), now), now)
    }

    /// A host built from `records` (a restart) at [`START_WALL_MS`].
    pub fn with_records(config: Config, records: Vec<SessionRecord>) -> Harness {
        let now = Now { mono: MonoTime(0), wall: WallTime(START_WALL_MS) };
        Harness::with_records_at(config, records, now)
    }

    /// A host built from `records` at `now` (a restart at that time).
    pub fn with_records_at(config: Config, records: Vec<SessionRecord>, now: Now) -> Harness {
        Harness::built(Host::new(config, 1, records, now), now)
    }

    fn built(host: Host, now: Now) -> Harness {
        Harness { host, now, pending: Vec::new(), step_ms: 0, fs: crate::files::memfs::MemFs::new(), next_id: 100, client_seq: 0 }
    }

    /// Moves both clocks `ms` forward and hands the host a tick.
    pub fn advance(&mut self, ms: u64) {
        self.now.mono = self.now.mono.plus_ms(ms);
        self.now.wall = WallTime(self.now.wall.0 + ms as i64);
        self.input(Input::Tick);
    }

    /// Hands `input` to the host (after moving the clocks [`Harness::step_ms`])
    /// and keeps its effects. Panics when the host's state breaks a rule
    /// of [`crate::invariants`], or a step rule across the input.
    pub fn input(&mut self, input: Input) {
        if self.step_ms > 0 {
            self.now.mono = self.now.mono.plus_ms(self.step_ms);
            self.now.wall = WallTime(self.now.wall.0 + self.step_ms as i64);
        }
        let before = crate::invariants::before(&self.host.view());
        let effects = self.host.handle(self.now, input);
        let view = self.host.view();
        if let Err(v) = crate::invariants::check_all(&view).and_then(|()| crate::invariants::check_step(&before, &view)) {
            panic!("invariant {} broken: {}", v.rule, v.detail);
        }
        self.pending.extend(effects);
    }

    /// Connects `conn` and initializes it as `client_id`, subscribed to the
    /// root; panics when the handshake is refused.
    pub fn connect(&mut self, conn: u64, client_id: &str) {
        self.input(Input::Connected { conn: ConnId(conn) });
        let r = self.request(conn, "initialize", json!({
            "channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": client_id,
            "initialSubscriptions": ["ahp-root://"]
        }));
        assert_eq!(r["result"]["protocolVersion"], "1.0.0", "{r}");
    }

    /// Sends a request and returns its reply (panics if none came).
    pub fn request(&mut self, conn: u64, method: &str, params: Value) -> Value {
        let id = self.send_request(conn, method, params);
        self.take_reply(conn, id).unwrap_or_else(|| panic!("no reply to {method}; pending: {:#?}", self.pending))
    }

    /// Sends a request with a fresh id; returns the id.
    pub fn send_request(&mut self, conn: u64, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        let text = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        self.input(Input::Frame { conn: ConnId(conn), text });
        id
    }

    /// Sends one frame as it is.
    pub fn raw(&mut self, conn: u64, text: &str) {
        self.input(Input::Frame { conn: ConnId(conn), text: text.to_owned() });
    }

    /// Dispatches `action` on `channel` with `client_seq`.
    pub fn dispatch(&mut self, conn: u64, channel: &str, client_seq: i64, action: Value) {
        let text = json!({"jsonrpc": "2.0", "method": "dispatchAction",
            "params": {"channel": channel, "clientSeq": client_seq, "action": action}}).to_string();
        self.input(Input::Frame { conn: ConnId(conn), text });
    }

    /// Dispatches `action` on `channel` with the next of the harness's own
    /// client sequence numbers (1, 2, … across connections).
    pub fn dispatch_next(&mut self, conn: u64, channel: &str, action: Value) {
        self.client_seq += 1;
        let seq = self.client_seq;
        self.dispatch(conn, channel, seq, action);
    }

    /// Removes and returns the reply to request `id` on `conn`, if sent.
    pub fn take_reply(&mut self, conn: u64, id: u64) -> Option<Value> {
        let pos = self.pending.iter().position(|e| match e {
            Effect::Send { conn: c, message: Outbound::Result { id: i, .. } | Outbound::Error { id: Some(i), .. } } => {
                c.0 == conn && *i == id
            }
            _ => false,
        })?;
        match self.pending.remove(pos) {
            Effect::Send { message, .. } => serde_json::from_str(&message.to_json()).ok(),
            _ => None,
        }
    }

    /// All frames sent to `conn` so far (as JSON), removing them.
    pub fn frames(&mut self, conn: u64) -> Vec<Value> {
        let mut out = Vec::new();
        self.pending.retain(|e| match e {
            Effect::Send { conn: c, message } if c.0 == conn => {
                out.push(serde_json::from_str(&message.to_json()).unwrap_or(Value::Null));
                false
            }
            _ => true,
        });
        out
    }

    /// Removes and returns the backend commands issued so far: op, chat,
    /// command.
    pub fn backend_cmds(&mut self) -> Vec<(OpId, String, BackendCmd)> {
        self.take(|e| match e {
            Effect::Backend { op, chat, command, .. } => Some((*op, chat.clone(), command.clone())),
            _ => None,
        })
    }

    /// Removes the pending effects `pick` names (`Some`) and returns what it
    /// made of each, in order; the others stay pending.
    pub fn take<T>(&mut self, mut pick: impl FnMut(&Effect) -> Option<T>) -> Vec<T> {
        let mut out = Vec::new();
        self.pending.retain(|e| match pick(e) {
            Some(t) => {
                out.push(t);
                false
            }
            None => true,
        });
        out
    }

    /// Removes and returns the store commands issued so far.
    pub fn store_ops(&mut self) -> Vec<(OpId, StoreCmd)> {
        self.take(|e| match e {
            Effect::Store { op, command } => Some((*op, command.clone())),
            _ => None,
        })
    }

    /// Removes and returns the git commands issued so far.
    pub fn git_cmds(&mut self) -> Vec<(OpId, GitCmd)> {
        self.take(|e| match e {
            Effect::Git { op, command } => Some((*op, command.clone())),
            _ => None,
        })
    }

    /// Answers every git command as a machine with no repositories would
    /// (a folder session's turn runs without checkpoints), along with store
    /// and backend commands, until none of them is pending; returns the
    /// backend commands seen.
    pub fn settle_no_repo(&mut self) -> Vec<(String, BackendCmd)> {
        let mut seen = Vec::new();
        loop {
            seen.extend(self.settle());
            let git = self.git_cmds();
            if git.is_empty() {
                return seen;
            }
            for (op, command) in git {
                let result = command.no_repo_answer();
                self.done(op, Outcome::Git(result));
            }
        }
    }

    /// Answers command `op` with `outcome`.
    pub fn done(&mut self, op: OpId, outcome: Outcome) {
        self.input(Input::Done { op, outcome });
    }

    /// Answers every store command with Ok, repeatedly, until none is left.
    pub fn settle_store(&mut self) {
        loop {
            let ops = self.store_ops();
            if ops.is_empty() {
                return;
            }
            for (op, _) in ops {
                self.done(op, Outcome::Ok);
            }
        }
    }

    /// Answers the repository facts a `createSession` asks for before it
    /// makes its session (`GitCmd::Inspect`) as a folder in no repository
    /// would. A test that wants a repository takes the command with
    /// [`Harness::git_cmds`] and answers it first.
    pub fn answer_inspects(&mut self) {
        let mut asked = Vec::new();
        self.pending.retain(|e| match e {
            Effect::Git { op, command: command @ GitCmd::Inspect { .. } } => {
                asked.push((*op, command.no_repo_answer()));
                false
            }
            _ => true,
        });
        for (op, result) in asked {
            self.done(op, Outcome::Git(result));
        }
    }

    /// Answers backend commands like an agent that always works: starts
    /// (a new conversation, no history), acknowledges the rest. Folder
    /// facts a `createSession` waits on are answered first
    /// ([`Harness::answer_inspects`]). Returns the backend commands seen:
    /// chat, command.
    pub fn settle_backend(&mut self) -> Vec<(String, BackendCmd)> {
        let mut seen = Vec::new();
        loop {
            self.answer_inspects();
            let cmds = self.backend_cmds();
            if cmds.is_empty() {
                return seen;
            }
            for (op, chat, cmd) in cmds {
                let outcome = match &cmd {
                    BackendCmd::Start { conversation_id, .. } => {
                        Outcome::Started { conversation_id: conversation_id.clone(), history: Vec::new() }
                    }
                    _ => Outcome::Ok,
                };
                seen.push((chat, cmd));
                self.done(op, outcome);
            }
        }
    }

    /// Answers store and backend commands until neither is pending;
    /// returns the backend commands seen.
    pub fn settle(&mut self) -> Vec<(String, BackendCmd)> {
        let mut seen = Vec::new();
        loop {
            self.settle_store();
            let more = self.settle_backend();
            if more.is_empty() && self.store_ops_pending() == 0 {
                return seen;
            }
            seen.extend(more);
        }
    }

    fn store_ops_pending(&self) -> usize {
        self.pending.iter().filter(|e| matches!(e, Effect::Store { .. })).count()
    }

    /// Answers each command pending now once, in order, and drops every
    /// other effect: a start as a new conversation, other backend, store
    /// and registry commands as done, git with `git(command)`. What the
    /// answers issue stays pending for the next call (the fuzz target's
    /// rhythm: one input, then one round of answers).
    pub fn answer_each(&mut self, mut git: impl FnMut(&GitCmd) -> Outcome) {
        for effect in std::mem::take(&mut self.pending) {
            let done = match effect {
                Effect::Backend { op, command: BackendCmd::Start { conversation_id, .. }, .. } => {
                    Some((op, Outcome::Started { conversation_id, history: Vec::new() }))
                }
                Effect::Backend { op, .. } | Effect::Store { op, .. } | Effect::Registry { op, .. } => Some((op, Outcome::Ok)),
                Effect::Git { op, command } => Some((op, git(&command))),
                Effect::Fs { op, command } => {
                    let result = self.fs.run(&command);
                    (!matches!(command, crate::files::fs::FsCmd::Unwatch { .. })).then_some((op, Outcome::Fs(result)))
                }
                Effect::Send { .. } | Effect::Close { .. } | Effect::Scan { .. } | Effect::Log(_) | Effect::HostToolAnswer { .. } | Effect::Release(_) => None,
            };
            if let Some((op, outcome)) = done {
                self.done(op, outcome);
            }
        }
    }

    /// Runs every pending filesystem command on [`Harness::fs`] and hands
    /// the host each answer, until none is pending; then the changes the
    /// watches placed on it saw, one `Input::FsChanged` batch per watch.
    /// Returns the commands run, in order.
    pub fn settle_fs(&mut self) -> Vec<crate::files::fs::FsCmd> {
        let mut seen = Vec::new();
        loop {
            let cmds = self.take(|e| match e {
                Effect::Fs { op, command } => Some((*op, command.clone())),
                _ => None,
            });
            if cmds.is_empty() {
                break;
            }
            for (op, command) in cmds {
                let result = self.fs.run(&command);
                let answered = !matches!(command, crate::files::fs::FsCmd::Unwatch { .. });
                seen.push(command);
                if answered {
                    self.done(op, Outcome::Fs(result));
                }
            }
        }
        for (watch, changes) in self.fs.take_batches() {
            self.input(Input::FsChanged { watch, changes });
        }
        seen
    }

    /// Sends a files request and returns its reply once the filesystem
    /// commands it asks are run ([`Harness::settle_fs`]).
    pub fn request_fs(&mut self, conn: u64, method: &str, params: Value) -> Value {
        let id = self.send_request(conn, method, params);
        self.settle_fs();
        self.take_reply(conn, id).unwrap_or_else(|| panic!("no reply to {method}; pending: {:#?}", self.pending))
    }

    /// Answers every store write, keeping the last record written per key
    /// in `disk` (what a restart reads back).
    pub fn durable(&mut self, disk: &mut std::collections::BTreeMap<String, SessionRecord>) {
        loop {
            let ops = self.store_ops();
            if ops.is_empty() {
                return;
            }
            for (op, cmd) in ops {
                if let StoreCmd::Put { record, .. } = cmd {
                    disk.insert(record.key().into_owned(), *record);
                }
                self.done(op, Outcome::Ok);
            }
        }
    }

    /// The agent in `chat` calls host tool `tool`; returns the one answer
    /// (panics when there is none, or more than one).
    pub fn tool(&mut self, chat: &str, tool: crate::tools::HostToolRequest) -> crate::tools::HostToolResult {
        self.next_id += 1;
        let call = crate::tools::HostCallId(self.next_id);
        self.input(Input::HostTool { call, chat: chat.into(), tool });
        let answers = self.take(|e| match e {
            Effect::HostToolAnswer { call: c, result } if *c == call => Some(result.clone()),
            _ => None,
        });
        assert_eq!(answers.len(), 1, "exactly one answer per call: {answers:?}");
        answers.into_iter().next().unwrap_or_else(|| unreachable!())
    }

    /// The agent in `chat` calls host tool `tool` and the answer may come
    /// later (`start_child_session`): returns the call, for
    /// [`Harness::tool_answer`].
    pub fn tool_call(&mut self, chat: &str, tool: crate::tools::HostToolRequest) -> crate::tools::HostCallId {
        self.next_id += 1;
        let call = crate::tools::HostCallId(self.next_id);
        self.input(Input::HostTool { call, chat: chat.into(), tool });
        call
    }

    /// The answer to `call` among the effects pending, taken (`None` while
    /// there is none; panics when there are two).
    pub fn tool_answer(&mut self, call: crate::tools::HostCallId) -> Option<crate::tools::HostToolResult> {
        let answers = self.take(|e| match e {
            Effect::HostToolAnswer { call: c, result } if *c == call => Some(result.clone()),
            _ => None,
        });
        assert!(answers.len() <= 1, "at most one answer per call: {answers:?}");
        answers.into_iter().next()
    }

    /// Drops the log lines pending.
    pub fn drop_logs(&mut self) {
        self.pending.retain(|e| !matches!(e, Effect::Log(_)));
    }

    /// Creates session `id` on `conn` (echo, no folder) and answers its
    /// start; returns (session, default chat).
    pub fn create(&mut self, conn: u64, id: &str) -> (String, String) {
        let uri = format!("ahp-session:/{id}");
        let rid = self.send_request(conn, "createSession", json!({"channel": uri, "provider": "echo"}));
        self.settle_backend();
        let reply = self.take_reply(conn, rid).expect("createSession reply");
        assert_eq!(reply["result"], Value::Null, "{reply}");
        (uri, format!("ahp-chat:/ahp-session@{id}"))
    }

    /// Creates session `id` on connection 1 in `folder` with `config`:
    /// answers the question about the folder's repository with `facts`
    /// (asked before anything is made), then its start, and subscribes to
    /// the session and its chat; returns (session, chat).
    pub fn create_in(&mut self, id: &str, folder: &str, config: Value, facts: RepoFacts) -> (String, String) {
        let uri = format!("ahp-session:/{id}");
        let dir = format!("file://{folder}");
        let rid = self.send_request(1, "createSession", json!({"channel": uri, "provider": "echo", "workingDirectories": [dir], "config": config}));
        let cmds = self.git_cmds();
        assert!(matches!(&cmds[..], [(_, GitCmd::Inspect { folder: f, .. })] if f == folder), "the folder is asked about first: {cmds:?}");
        assert!(self.backend_cmds().is_empty(), "nothing is started before the config is settled");
        self.done(cmds[0].0, Outcome::Git(GitResult::Repo(facts)));
        self.settle_backend();
        let reply = self.take_reply(1, rid).expect("createSession reply");
        assert_eq!(reply["result"], Value::Null, "{reply}");
        let chat = format!("ahp-chat:/ahp-session@{id}");
        for channel in [&uri, &chat] {
            let r = self.request(1, "subscribe", json!({"channel": channel}));
            assert!(r.get("result").is_some(), "{r}");
        }
        (uri, chat)
    }

    /// Makes session `id` on connection 1 and runs one echoed turn in its
    /// default chat; returns the session and chat URIs.
    pub fn session_with_turn(&mut self, id: &str) -> (String, String) {
        let (uri, chat) = self.create(1, id);
        self.start_turn(1, &chat, 1, "t1", "hello");
        self.settle_backend();
        self.agent_reply(&chat, "t1", "Echo: hello");
        (uri, chat)
    }

    /// Starts turn `turn` with `text` in `chat` as `conn` (client sequence
    /// number `seq`) and makes its store write durable.
    pub fn start_turn(&mut self, conn: u64, chat: &str, seq: i64, turn: &str, text: &str) {
        self.dispatch(conn, chat, seq, json!({
            "type": "chat/turnStarted", "turnId": turn, "startedAt": "2000-01-01T00:00:00Z",
            "message": {"text": text, "origin": {"kind": "user"}}
        }));
        self.settle_store();
    }

    /// The agent streams a reply and ends the turn.
    pub fn agent_reply(&mut self, chat: &str, turn: &str, text: &str) {
        let part = StateAction::ChatResponsePart(ChatResponsePartAction {
            turn_id: turn.into(),
            part: ResponsePart::Markdown(MarkdownResponsePart { id: "p1".into(), content: String::new() }),
            meta: None,
        });
        let delta = StateAction::ChatDelta(ChatDeltaAction { turn_id: turn.into(), part_id: "p1".into(), content: text.into(), meta: None });
        let done = StateAction::ChatTurnComplete(ChatTurnCompleteAction { turn_id: turn.into(), duration: 0, meta: None });
        for a in [part, delta, done] {
            self.input(Input::Backend { chat: chat.into(), event: BackendEvent::Action(a) });
        }
        self.settle_store();
    }

    /// The catalogue's rows as `conn` lists them (`listSessions`, no limit).
    pub fn list(&mut self, conn: u64) -> Vec<Value> {
        let r = self.request(conn, "listSessions", json!({"channel": "ahp-root://"}));
        r["result"]["items"].as_array().cloned().unwrap_or_default()
    }
}
