//! Simulated clients that speak JSON text to the host, and the models they
//! keep (docs/STYLE.md 3.6, "Clients as models").
//!
//! Each client keeps a mirror of every channel it subscribed to: seeded from
//! the snapshot, advanced by applying every accepted `action` envelope with
//! the official `ahp` reducers. It checks protocol-visible rules as frames
//! arrive: one reply per request, `serverSeq` strictly increasing on its
//! connection, snapshots of the right shape, and page walks that neither
//! repeat a row nor run forever.

use std::collections::{BTreeMap, BTreeSet};

use ahp::reducers::{apply_action_to_chat, apply_action_to_root, apply_action_to_session, ReduceOutcome};
use ahp_types::actions::{ActionEnvelope, StateAction};
use ahp_types::commands::{InitializeResult, ListSessionsResult, ReconnectResult, SubscribeResult};
use ahp_types::notifications::{SessionAddedParams, SessionRemovedParams, SessionSummaryChangedParams};
use ahp_types::state::{ChatState, ResponsePart, RootState, SessionState, Snapshot, SnapshotState, ToolCallState};
use ahp_types::{Uri, ROOT_RESOURCE_URI};
use ahpd_core::invariants::Violation;
use ahpd_core::time::WallTime;
use ahpd_core::ConnId;
use serde_json::{json, Value};

use crate::rng::SimRng;
use crate::wire::HostFrame;

/// The state a client mirrors for one channel.
#[derive(Debug, Clone, PartialEq)]
pub enum MirrorState {
    /// `ahp-root://`.
    Root(Box<RootState>),
    /// A session channel.
    Session(Box<SessionState>),
    /// A chat channel.
    Chat(Box<ChatState>),
}

/// One mirrored channel.
#[derive(Debug, Clone, PartialEq)]
pub struct Mirror {
    /// The state, as the client holds it.
    pub state: MirrorState,
    /// False when subscribed with a `view` limit (then it is not compared).
    pub full: bool,
    /// The snapshot's `fromSeq`: every later envelope must be newer.
    pub from_seq: u64,
}

/// What a request was, so its reply can be checked and used.
#[derive(Debug, Clone, PartialEq)]
pub enum ReqKind {
    /// `initialize`, with the channels its `initialSubscriptions` named.
    Initialize {
        /// The channels named, in order.
        named: Vec<Uri>,
    },
    /// `reconnect` with the channels it listed.
    Reconnect,
    /// `subscribe` to a channel, with or without a view limit.
    Subscribe {
        /// The channel.
        channel: Uri,
        /// No view limit.
        full: bool,
    },
    /// A page of a `listSessions` walk.
    List,
    /// `createSession` of a URI (learnt on success).
    Create {
        /// The session URI.
        uri: Uri,
    },
    /// `authenticate` with the client's own token: must succeed.
    Auth,
    /// A request that must be refused with this JSON-RPC error code.
    Expect {
        /// The code.
        code: i64,
    },
    /// `listSessions` with `_meta: {"ahpd.owner": "me"}`: no rows when
    /// `empty` (a host with no users directory names nobody).
    Mine {
        /// Whether the answer must have no rows.
        empty: bool,
    },
    /// `ahpd/listPeers`: its answer's shape is checked.
    Peers,
    /// `createSession` in a folder of the machine; `untrusted` when the
    /// seed's trust list does not cover it (then it must be refused with
    /// -32009 and nothing made), `worktree` when it asked for a tree.
    CreateIn {
        /// The session URI.
        uri: Uri,
        /// The folder is outside every trusted folder (`None`: not known
        /// to the client, a tree whose session may be gone).
        untrusted: Option<bool>,
        /// It asked `isolation: worktree`.
        worktree: bool,
        /// It named a folder that is not a `file:` URI of a directory
        /// (issue 25): it must be refused (-32602, or -32009 first when
        /// the grants or the trusted folders refuse it).
        bad_folder: bool,
    },
    /// `createAgentHostDetachedWorktree` (learns the handle and the tree).
    Detached,
    /// Anything whose result is not used.
    Plain,
}

/// One request awaiting its reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Req {
    /// The method.
    pub method: &'static str,
    /// What to do with the reply.
    pub kind: ReqKind,
}

/// A `listSessions` walk in progress.
#[derive(Debug, Clone, PartialEq)]
pub struct Walk {
    /// The page size asked for (`None` = no limit).
    pub limit: Option<i64>,
    /// Rows seen so far, with the URI's incarnation when seen.
    pub seen: BTreeMap<Uri, u64>,
    /// Pages answered so far.
    pub pages: u32,
}

/// Something a client wants the world to do.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientOut {
    /// Send one text frame on the client's connection.
    Frame(String),
    /// Drop the connection.
    Disconnect,
}

/// What a client reads from the world while it acts.
#[derive(Debug, Clone, Copy)]
pub struct ClientCtx<'a> {
    /// Size of the session id space.
    pub session_ids: u64,
    /// Whether a non-resumable provider is offered.
    pub oneshot: bool,
    /// The host's cap on a `listSessions` page.
    pub list_limit_max: usize,
    /// How many times each URI was removed from the host (a walk may see a
    /// URI again only after it was removed and made anew).
    pub incarnations: &'a BTreeMap<Uri, u64>,
    /// Workspace awareness: the tiers sessions ask for.
    pub awareness: crate::registry::AwarenessOptions,
    /// The simulated machine's git and trust (`sim/src/git.rs`).
    pub git: &'a crate::options::GitOptions,
    /// Whether clients make and run automations (`automations.rs`).
    pub automations: bool,
}

/// Counters of what clients did, for the run summary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Requests sent.
    pub requests: u64,
    /// Actions dispatched.
    pub dispatches: u64,
    /// Accepted envelopes applied to mirrors.
    pub applied: u64,
    /// Rejected envelopes seen.
    pub rejected: u64,
    /// Page walks completed.
    pub walks: u64,
    /// Reconnects answered with a replay.
    pub replays: u64,
}

/// One simulated client.
#[derive(Debug, Clone)]
pub struct Client {
    /// Its index in the world.
    pub index: usize,
    /// Its `clientId`, kept across reconnects.
    pub client_id: String,
    /// Its current connection, if any.
    pub conn: Option<ConnId>,
    /// Whether `initialize` or `reconnect` was answered on `conn`.
    pub ready: bool,
    next_id: u64,
    /// Requests awaiting a reply on `conn`, by id.
    pub outstanding: BTreeMap<u64, Req>,
    /// Mirrored channels.
    pub mirrors: BTreeMap<Uri, Mirror>,
    watermark: u64,
    conn_last_seq: u64,
    client_seq: i64,
    pub(crate) turns: u64,
    /// The `listSessions` walk in progress.
    pub walk: Option<Walk>,
    /// Sessions this client has heard of.
    pub known: BTreeSet<Uri>,
    /// Counters.
    pub stats: ClientStats,
    /// Who it signs in as on every connection (`users.rs`), if anybody.
    pub signer: Option<crate::users::Signer>,
    /// Whether the host has a users directory (then a client that is not
    /// signed in may read nothing).
    pub users_host: bool,
    /// Tree folders (`file:` URIs) learnt from sessions' states and the
    /// window's trees, to make sessions in and move sessions to.
    pub trees: BTreeSet<Uri>,
    /// The window's detached-tree handles it was given, with their tree.
    pub handles: Vec<(String, Uri)>,
    /// Sessions it made with `isolation: worktree` that may still be
    /// creating (a window's tree can be cut for them).
    worktree_creating: Vec<Uri>,
    /// Sessions it asked for outside a folder so far: every
    /// [`BAD_FOLDER_EVERY`]th names a folder `createSession` must refuse
    /// (issue 25), chosen by count rather than a draw so that the workload
    /// stream is the one it was.
    plain_creates: u64,
    /// Its view of the catalogue's rows, if it has one: every row of a
    /// one-page `listSessions` answered while subscribed to the root, as
    /// the root notifications since have left them (issue 19: "its clients
    /// keep a mirror of every row from listSessions + root notifications").
    pub rows: Option<RowMirror>,
}

/// A client's rows of the catalogue (see [`Client::rows`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RowMirror {
    /// The root snapshot's `fromSeq` the rows go with: a new root
    /// subscription (or none) makes them stale.
    pub root_from_seq: u64,
    /// Each row as JSON, by session URI.
    pub rows: BTreeMap<Uri, Value>,
}

impl Client {
    /// The client's rows, while they still go with its root subscription.
    pub fn current_rows(&self) -> Option<&BTreeMap<Uri, Value>> {
        let rows = self.rows.as_ref()?;
        let root = self.mirrors.get(ROOT_RESOURCE_URI)?;
        (root.from_seq == rows.root_from_seq).then_some(&rows.rows)
    }

    fn rows_mut(&mut self) -> Option<&mut BTreeMap<Uri, Value>> {
        let from_seq = self.mirrors.get(ROOT_RESOURCE_URI)?.from_seq;
        self.rows.as_mut().filter(|r| r.root_from_seq == from_seq).map(|r| &mut r.rows)
    }
}

/// The session URI of id `n`.
pub fn session_uri(n: u64) -> Uri {
    format!("ahp-session:/s{n}")
}

/// The default chat URI the host gives the session of id `n`.
pub fn default_chat_uri(n: u64) -> Uri {
    format!("ahp-chat:/ahp-session@s{n}")
}

/// The default chat URI the host gives session `uri` (`scheme:/id` →
/// `ahp-chat:/scheme@id`).
pub fn default_chat_of(uri: &str) -> Uri {
    format!("ahp-chat:/{}", uri.replacen(":/", "@", 1))
}

fn breach(rule: &'static str, detail: String) -> Violation {
    Violation { rule, detail }
}

/// A request's text: `{"jsonrpc":"2.0","id":…,"method":…,"params":…}`,
/// the text `json!({...}).to_string()` makes, written without building
/// the outer object (a `Value` map hashes every key it holds).
fn request(id: u64, method: &str, params: Value) -> String {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    push_json(&mut out, &id);
    out.extend_from_slice(br#","method":"#);
    push_json(&mut out, method);
    out.extend_from_slice(br#","params":"#);
    push_json(&mut out, &params);
    out.push(b'}');
    json_text(out)
}

/// Appends `value` as serde_json writes it (compact, as `to_string`).
fn push_json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    serde_json::to_writer(out, value).expect("strings, numbers and Values serialize");
}

/// The text of JSON written by [`push_json`].
fn json_text(out: Vec<u8>) -> String {
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

fn user_message(text: &str) -> Value {
    json!({"text": text, "origin": {"kind": "user"}})
}

/// What kind of state a channel URI holds.
fn channel_kind(uri: &str) -> &'static str {
    if uri == ROOT_RESOURCE_URI {
        "root"
    } else if uri.starts_with("ahp-chat:") {
        "chat"
    } else {
        "session"
    }
}

impl Client {
    /// A client that has not connected yet.
    pub fn new(index: usize) -> Client {
        Client {
            index,
            client_id: format!("client-{index}"),
            conn: None,
            ready: false,
            next_id: 1,
            outstanding: BTreeMap::new(),
            mirrors: BTreeMap::new(),
            watermark: 0,
            conn_last_seq: 0,
            client_seq: 0,
            turns: 0,
            walk: None,
            known: BTreeSet::new(),
            stats: ClientStats::default(),
            signer: None,
            users_host: false,
            trees: BTreeSet::new(),
            handles: Vec::new(),
            worktree_creating: Vec::new(),
            plain_creates: 0,
            rows: None,
        }
    }

    /// Whether the host lets this client read sessions (`session:read`).
    pub fn may_read(&self) -> bool {
        !self.users_host || self.signer.is_some()
    }

    pub(crate) fn send_request(&mut self, method: &'static str, params: Value, kind: ReqKind) -> ClientOut {
        let id = self.next_id;
        self.next_id += 1;
        self.outstanding.insert(id, Req { method, kind });
        self.stats.requests += 1;
        ClientOut::Frame(request(id, method, params))
    }

    pub(crate) fn dispatch(&mut self, channel: &str, action: Value) -> ClientOut {
        self.client_seq += 1;
        self.stats.dispatches += 1;
        // The text of `json!({"jsonrpc": "2.0", "method": "dispatchAction",
        // "params": {"channel": channel, "clientSeq": …, "action": action}})`,
        // written without building the two outer objects.
        let mut out = Vec::with_capacity(192);
        out.extend_from_slice(br#"{"jsonrpc":"2.0","method":"dispatchAction","params":{"channel":"#);
        push_json(&mut out, channel);
        out.extend_from_slice(br#","clientSeq":"#);
        push_json(&mut out, &self.client_seq);
        out.extend_from_slice(br#","action":"#);
        push_json(&mut out, &action);
        out.extend_from_slice(b"}}");
        ClientOut::Frame(json_text(out))
    }

    /// The connection `conn` is up: say hello, with `reconnect` (when there
    /// are mirrors to resume and the dice say so) or `initialize`.
    pub fn on_connected(&mut self, conn: ConnId, rng: &mut SimRng) -> Vec<ClientOut> {
        self.conn = Some(conn);
        self.ready = false;
        self.conn_last_seq = 0;
        self.outstanding.clear();
        self.walk = None;
        // Signing in comes first, so that the handshake's channels are
        // checked against who the connection is.
        let mut out = Vec::new();
        if let Some(token) = self.signer.as_ref().map(|s| s.token.clone()) {
            out.push(self.send_request("authenticate", json!({"channel": ROOT_RESOURCE_URI, "resource": "ahpd", "token": token}), ReqKind::Auth));
        }
        // After a host crash too: serverSeq starts from the wall clock, so
        // a `lastSeenServerSeq` of the old process is told from the new.
        if !self.mirrors.is_empty() && rng.chance(0.6) {
            let subscriptions: Vec<Uri> = self.mirrors.keys().cloned().collect();
            let params = json!({
                "channel": ROOT_RESOURCE_URI,
                "clientId": self.client_id,
                "lastSeenServerSeq": self.watermark,
                "subscriptions": subscriptions,
            });
            out.push(self.send_request("reconnect", params, ReqKind::Reconnect));
        } else {
            out.push(self.initialize(rng));
        }
        out
    }

    fn initialize(&mut self, rng: &mut SimRng) -> ClientOut {
        self.mirrors.clear();
        self.rows = None;
        let mut initial: Vec<Uri> = if rng.chance(0.7) { vec![ROOT_RESOURCE_URI.to_owned()] } else { vec![] };
        // Sometimes name sessions it heard of too: after a host restart or
        // an eviction they are rows, woken before the reply.
        if rng.chance(0.3) {
            let known: Vec<Uri> = self.known.iter().cloned().collect();
            for _ in 0..3 {
                if let Some(uri) = rng.pick(&known) {
                    if !initial.contains(uri) {
                        initial.push(uri.clone());
                    }
                }
            }
        }
        let params = json!({
            "channel": ROOT_RESOURCE_URI,
            "protocolVersions": ["1.0.0"],
            "clientId": self.client_id,
            "initialSubscriptions": initial,
        });
        self.send_request("initialize", params, ReqKind::Initialize { named: initial })
    }

    /// The connection is gone (closed by either side, or the host crashed).
    /// Requests on it are abandoned; mirrors are kept for a `reconnect`.
    pub fn on_closed(&mut self) {
        self.conn = None;
        self.ready = false;
        self.outstanding.clear();
        self.walk = None;
        self.rows = None;
    }

    /// Whether the client is idle: connected, answered, nothing in flight.
    pub fn settled(&self) -> bool {
        self.outstanding.is_empty() && self.walk.is_none()
    }

    /// The client decides what to do next (workload stream).
    pub fn think(&mut self, rng: &mut SimRng, ctx: &ClientCtx<'_>) -> Vec<ClientOut> {
        if self.conn.is_none() || !self.ready {
            return Vec::new();
        }
        let has_root = self.mirrors.contains_key(ROOT_RESOURCE_URI);
        let weights = [
            8,                                   // 0 create
            8,                                   // 1 subscribe session
            8,                                   // 2 subscribe chat
            if has_root { 0 } else { 2 },        // 3 subscribe root
            4,                                   // 4 unsubscribe
            16,                                  // 5 start a turn
            5,                                   // 6 cancel
            8,                                   // 7 confirm a tool call
            8,                                   // 8 title / read / archive
            if self.walk.is_none() { 4 } else { 0 }, // 9 list walk
            3,                                   // 10 dispose
            2,                                   // 11 fetchTurns
            1,                                   // 12 ping
            1,                                   // 13 a server-only action
            3,                                   // 14 createChat
            2,                                   // 15 disposeChat
            if ctx.awareness.enabled { 2 } else { 0 }, // 16 ahpd/listPeers
            if ctx.git.repos { 8 } else { 2 },   // 17 git, trees and trust
            4,                                   // 18 a chat's shape (`chat_shape.rs`)
            8,                                   // 19 queue, remove, reorder (pending.rs)
            8,                                   // 20 draft, answer a question (questions.rs)
            6,                                   // 21 resume, steer, move (resume_move.rs)
            4,                                   // 22 moveChat (chat_move.rs)
            if ctx.automations { 3 } else { 0 }, // 23 automations (automations.rs)
            2,                                   // 24 a session's files (files.rs)
        ];
        // Picked from borrows: only the one picked is copied.
        let known: Vec<&Uri> = self.known.iter().collect();
        let session = match rng.pick(&known) {
            Some(&uri) if rng.chance(0.6) => uri.clone(),
            _ => session_uri(rng.below(ctx.session_ids)),
        };
        // The chats this client has seen listed in that session, else its
        // default chat.
        let listed: Vec<Uri> = match self.mirrors.get(&session).map(|m| &m.state) {
            Some(MirrorState::Session(s)) => s.chats.iter().map(|c| c.resource.clone()).collect(),
            _ => Vec::new(),
        };
        let chat = match rng.pick(&listed) {
            Some(c) if rng.chance(0.5) => c.clone(),
            _ => default_chat_of(&session),
        };
        let mut out = Vec::new();
        if let Some(users_out) = crate::users::think(self, rng, &session, &chat) {
            return users_out;
        }
        match rng.weighted(&weights) {
            0 => {
                let provider = if ctx.oneshot && rng.chance(0.3) { "oneshot" } else { "echo" };
                if rng.chance(ctx.git.in_folders) {
                    out.push(self.create_in_folder(rng, ctx, session, provider));
                } else {
                    let mut params = json!({"channel": session, "provider": provider});
                    if rng.chance(0.5) {
                        params["workingDirectories"] = json!(["file:///work/a", "file:///work/b"]);
                    }
                    self.plain_creates += 1;
                    let bad_folder = self.plain_creates % BAD_FOLDER_EVERY == 0;
                    if bad_folder {
                        params["workingDirectories"] = bad_folders(self.plain_creates / BAD_FOLDER_EVERY, provider == "echo");
                    }
                    // Every folder must be trusted, and with a list a session
                    // with none is refused.
                    let folders: Vec<&str> = params["workingDirectories"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
                    let untrusted = ctx.git.trusted_folders.as_ref().is_some_and(|l| folders.is_empty() || folders.iter().any(|f| !trusted_by(l, f)));
                    let kind = ReqKind::CreateIn { uri: session, untrusted: Some(untrusted), worktree: false, bad_folder };
                    out.push(self.send_request("createSession", params, kind));
                }
            }
            1 => {
                let channel = session;
                out.push(self.send_request("subscribe", json!({"channel": channel}), ReqKind::Subscribe { channel, full: true }));
            }
            2 => {
                let full = rng.chance(0.85);
                let params = if full { json!({"channel": chat}) } else { json!({"channel": chat, "view": {"turns": 1}}) };
                out.push(self.send_request("subscribe", params, ReqKind::Subscribe { channel: chat, full }));
            }
            3 => {
                let channel = ROOT_RESOURCE_URI.to_owned();
                out.push(self.send_request("subscribe", json!({"channel": channel}), ReqKind::Subscribe { channel, full: true }));
            }
            4 => {
                let channels: Vec<Uri> = self.mirrors.keys().cloned().collect();
                if let Some(channel) = rng.pick(&channels).cloned() {
                    self.mirrors.remove(&channel);
                    if channel == ROOT_RESOURCE_URI {
                        self.rows = None;
                    }
                    // A subscribe still in flight for it is moot: its late
                    // snapshot must not bring the mirror back.
                    for req in self.outstanding.values_mut() {
                        if matches!(&req.kind, ReqKind::Subscribe { channel: c, .. } if *c == channel) {
                            req.kind = ReqKind::Plain;
                        }
                    }
                    let params = json!({"channel": channel});
                    if rng.chance(0.5) {
                        out.push(self.send_request("unsubscribe", params, ReqKind::Plain));
                    } else {
                        out.push(ClientOut::Frame(json!({"jsonrpc": "2.0", "method": "unsubscribe", "params": params}).to_string()));
                    }
                }
            }
            5 => {
                let chats: Vec<Uri> = self
                    .mirrors
                    .iter()
                    .filter(|(_, m)| matches!(&m.state, MirrorState::Chat(c) if c.active_turn.is_none()))
                    .map(|(u, _)| u.clone())
                    .collect();
                let target = match rng.pick(&chats) {
                    Some(c) if rng.chance(0.7) => c.clone(),
                    _ => chat,
                };
                self.turns += 1;
                let turn_id = format!("c{}-t{}", self.index, self.turns);
                let mut text = if rng.chance(0.5) { format!("hello {turn_id}\nsecond line") } else { format!("msg {turn_id}") };
                if self.turns % 13 == 7 {
                    // Now and then a message over the sim's text cap
                    // (`options.rs`, issue 25): refused with a reason.
                    text.push_str(&"x".repeat(crate::options::SIM_MESSAGE_TEXT_MAX_BYTES));
                }
                let action = json!({
                    "type": "chat/turnStarted",
                    "turnId": turn_id,
                    "startedAt": "2026-01-01T00:00:00.000Z",
                    "message": user_message(&text),
                });
                out.push(self.dispatch(&target, action));
            }
            6 => {
                let running: Vec<(Uri, String)> = self
                    .mirrors
                    .iter()
                    .filter_map(|(u, m)| match &m.state {
                        MirrorState::Chat(c) => c.active_turn.as_ref().map(|t| (u.clone(), t.id.clone())),
                        _ => None,
                    })
                    .collect();
                if let Some((channel, turn_id)) = rng.pick(&running).cloned() {
                    out.push(self.dispatch(&channel, json!({"type": "chat/turnCancelled", "turnId": turn_id, "duration": 0})));
                }
            }
            7 => {
                let pending: Vec<(Uri, String, String)> = self
                    .mirrors
                    .iter()
                    .filter_map(|(u, m)| match &m.state {
                        MirrorState::Chat(c) => c.active_turn.as_ref().and_then(|t| {
                            t.response_parts.iter().find_map(|p| match p {
                                ResponsePart::ToolCall(tc) => match &tc.tool_call {
                                    ToolCallState::PendingConfirmation(s) => Some((u.clone(), t.id.clone(), s.tool_call_id.clone())),
                                    _ => None,
                                },
                                _ => None,
                            })
                        }),
                        _ => None,
                    })
                    .collect();
                if let Some((channel, turn_id, tool_call_id)) = rng.pick(&pending).cloned() {
                    let approved = rng.chance(0.7);
                    out.push(self.dispatch(
                        &channel,
                        json!({"type": "chat/toolCallConfirmed", "turnId": turn_id, "toolCallId": tool_call_id, "approved": approved}),
                    ));
                }
            }
            8 => {
                let action = match rng.below(3) {
                    0 => {
                        // One in a hundred is over the title cap (issue 25):
                        // refused with a reason, the title kept.
                        let n = rng.below(100);
                        let title = if n == 99 { "t".repeat(ahpd_core::caps::TITLE_MAX_BYTES + 1) } else { format!("title {n}") };
                        json!({"type": "session/titleChanged", "title": title})
                    }
                    1 => json!({"type": "session/isReadChanged", "isRead": rng.chance(0.5)}),
                    _ => json!({"type": "session/isArchivedChanged", "isArchived": rng.chance(0.3)}),
                };
                out.push(self.dispatch(&session, action));
            }
            9 => {
                let limit = if rng.chance(0.8) { Some(rng.range(1, 4) as i64) } else { None };
                self.walk = Some(Walk { limit, seen: BTreeMap::new(), pages: 0 });
                out.push(self.list_page(None));
            }
            10 => {
                out.push(self.send_request("disposeSession", json!({"channel": session}), ReqKind::Plain));
            }
            11 => {
                out.push(self.send_request("fetchTurns", json!({"channel": chat}), ReqKind::Plain));
            }
            12 => {
                out.push(self.send_request("ping", json!({"channel": ROOT_RESOURCE_URI}), ReqKind::Plain));
            }
            13 => {
                out.push(self.dispatch(&session, json!({"type": "session/ready"})));
            }
            14 => {
                let new_chat = format!("ahp-chat:/{}-c{}", session.replacen(":/", "-", 1), rng.below(3));
                let mut params = json!({"channel": session, "chat": new_chat});
                if rng.chance(0.3) {
                    self.turns += 1;
                    params["initialMessage"] = user_message(&format!("first words c{}-t{}", self.index, self.turns));
                }
                out.push(self.send_request("createChat", params, ReqKind::Plain));
            }
            16 => {
                out.push(self.send_request("ahpd/listPeers", json!({"channel": session}), ReqKind::Peers));
            }
            17 => out.extend(self.git_action(rng, &session)),
            18 => out.extend(crate::chat_shape::think(self, rng, &session, &chat)),
            19 => out.extend(self.pending_action(rng, &chat)),
            20 => out.extend(self.question_action(rng, &chat)),
            21 => out.extend(self.resume_or_move(rng, &chat)),
            22 => out.extend(self.move_chat(rng, &session, &chat)),
            23 => out.extend(crate::automations::think(self, rng, &session)),
            24 => out.extend(crate::files::think(self, rng, &session)),
            _ => {
                let target = match rng.pick(&listed) {
                    Some(c) => c.clone(),
                    None => format!("ahp-chat:/{}-c{}", session.replacen(":/", "-", 1), rng.below(3)),
                };
                out.push(self.send_request("disposeChat", json!({"channel": target}), ReqKind::Plain));
            }
        }
        out
    }

    fn learn_trees(&mut self, folders: &[Uri]) {
        for f in folders {
            if f.contains(".worktrees/") && self.trees.len() < 32 {
                self.trees.insert(f.clone());
            }
        }
    }

    /// A folder to work in: one of the machine's, or (sometimes) a tree
    /// another session works in or the window made.
    fn pick_folder(&self, rng: &mut SimRng) -> (Uri, bool) {
        let trees: Vec<Uri> = self.trees.iter().cloned().collect();
        match rng.pick(&trees) {
            Some(t) if rng.chance(0.3) => (t.clone(), true),
            _ => (rng.pick(&crate::git::FOLDERS).copied().unwrap_or("file:///work/repo1").to_owned(), false),
        }
    }

    /// `createSession` in a folder of the machine, with the worktree keys
    /// sometimes.
    fn create_in_folder(&mut self, rng: &mut SimRng, ctx: &ClientCtx<'_>, session: Uri, provider: &str) -> ClientOut {
        let (folder, in_tree) = self.pick_folder(rng);
        let worktree = rng.chance(ctx.git.worktree);
        let mut config = json!({});
        if worktree {
            config["isolation"] = json!("worktree");
            if rng.chance(0.3) {
                config["branch"] = json!(*rng.pick(&["main", "dev", "feature", "trunk", "nope"]).unwrap_or(&"main"));
            }
            if rng.chance(0.2) {
                config["worktreeCreateNewBranch"] = json!(false);
            }
            if rng.chance(0.3) {
                config["worktreeBranchPrefix"] = json!(*rng.pick(&["me/", "team/x-", "bad..prefix/"]).unwrap_or(&"me/"));
            }
            if rng.chance(0.4) {
                config["worktreeSymlinkFolders"] = json!(["node_modules"]);
                config["worktreeIncludeFiles"] = json!([".env"]);
            }
            if rng.chance(0.2) {
                config["worktreeBranchTrack"] = json!(true);
            }
        } else if rng.chance(0.2) {
            config["isolation"] = json!("folder");
        }
        let untrusted = (!in_tree).then(|| ctx.git.trusted_folders.as_ref().is_some_and(|l| !trusted_by(l, &folder)));
        let params = json!({"channel": session, "provider": provider, "workingDirectories": [folder], "config": config});
        self.send_request("createSession", params, ReqKind::CreateIn { uri: session, untrusted, worktree, bad_folder: false })
    }

    /// One of the git, tree and trust moves: config resolution and
    /// completions, moving a session's root, archive toggles, and the
    /// window's five detached-tree requests.
    fn git_action(&mut self, rng: &mut SimRng, session: &Uri) -> Vec<ClientOut> {
        let (folder, _) = self.pick_folder(rng);
        match rng.weighted(&[3, 2, 3, 3, 2, 1, 2, 1, 1]) {
            0 => {
                let mut params = json!({"channel": ROOT_RESOURCE_URI, "workingDirectory": folder});
                if rng.chance(0.5) {
                    params["config"] = json!({"isolation": "worktree"});
                }
                vec![self.send_request("resolveSessionConfig", params, ReqKind::Plain)]
            }
            1 => {
                let property = *rng.pick(&["branch", "isolation", "scope", "nope"]).unwrap_or(&"branch");
                let query = if rng.chance(0.5) { "d" } else { "" };
                let params = json!({"channel": ROOT_RESOURCE_URI, "workingDirectory": folder, "property": property, "query": query});
                vec![self.send_request("sessionConfigCompletions", params, ReqKind::Plain)]
            }
            2 => {
                // Move the session's root to another folder (or a tree).
                let root = match self.mirrors.get(session).map(|m| &m.state) {
                    Some(MirrorState::Session(s)) => s.working_directories.as_ref().and_then(|l| l.first().cloned()),
                    _ => None,
                };
                let Some(old) = root.or_else(|| rng.pick(&crate::git::FOLDERS).map(|f| (*f).to_owned())) else { return Vec::new() };
                vec![self.dispatch(session, json!({"type": "session/workingDirectoryReplaced", "directory": old, "replacement": folder}))]
            }
            3 => {
                let archived = rng.chance(0.5);
                vec![self.dispatch(session, json!({"type": "session/isArchivedChanged", "isArchived": archived}))]
            }
            4 => {
                let target = rng.pick(&self.worktree_creating).cloned().unwrap_or_else(|| session.clone());
                let params = json!({"session": target, "prompt": format!("Make it faster c{}", self.index)});
                vec![self.send_request("vscode/createAgentHostDetachedWorktree", params, ReqKind::Detached)]
            }
            5 => {
                let Some((handle, _)) = rng.pick(&self.handles).cloned() else { return Vec::new() };
                vec![self.send_request("vscode/claimAgentHostDetachedWorktree", json!({"handle": handle}), ReqKind::Plain)]
            }
            6 => {
                let Some((handle, _)) = rng.pick(&self.handles).cloned() else { return Vec::new() };
                let archived = rng.chance(0.6);
                vec![self.send_request("vscode/setAgentHostDetachedWorktreeArchived", json!({"handle": handle, "archived": archived}), ReqKind::Plain)]
            }
            7 => {
                let Some((handle, _)) = rng.pick(&self.handles).cloned() else { return Vec::new() };
                if rng.chance(0.5) {
                    self.handles.retain(|(h, _)| *h != handle);
                }
                vec![self.send_request("vscode/deleteAgentHostDetachedWorktree", json!({"handle": handle}), ReqKind::Plain)]
            }
            _ => {
                let active: Vec<String> = self.handles.iter().filter(|_| rng.chance(0.7)).map(|(h, _)| h.clone()).collect();
                let scope = *rng.pick(&["file:///work/repo1", "file:///work"]).unwrap_or(&"file:///work");
                vec![self.send_request("vscode/reconcileAgentHostDetachedWorktrees", json!({"scope": scope, "activeHandles": active}), ReqKind::Plain)]
            }
        }
    }

    fn list_page(&mut self, cursor: Option<String>) -> ClientOut {
        let limit = self.walk.as_ref().and_then(|w| w.limit);
        let mut params = json!({"channel": ROOT_RESOURCE_URI});
        if let Some(l) = limit {
            params["limit"] = json!(l);
        }
        if let Some(c) = cursor {
            params["cursor"] = json!(c);
        }
        self.send_request("listSessions", params, ReqKind::List)
    }

    /// One frame from the host on connection `conn`. Frames for an old
    /// connection are dropped (the socket is gone).
    pub fn on_frame(&mut self, conn: ConnId, text: &str, ctx: &ClientCtx<'_>, rng: &mut SimRng) -> Result<Vec<ClientOut>, Violation> {
        if self.conn != Some(conn) {
            return Ok(Vec::new());
        }
        let frame = HostFrame::parse(text).map_err(|e| breach("client_frame_json", format!("undecodable frame {e}: {text}")))?;
        if !frame.jsonrpc_ok {
            return Err(breach("client_frame_json", format!("not JSON-RPC 2.0: {text}")));
        }
        if let Some(method) = &frame.method {
            return self.on_notification(method, frame.params.as_deref().unwrap_or("null"), ctx).map(|_| Vec::new());
        }
        let Some(id) = frame.id else {
            return Err(breach("rule2_one_reply_per_request", format!("a reply without a request id: {text}")));
        };
        let Some(req) = self.outstanding.remove(&id) else {
            return Err(breach("rule2_one_reply_per_request", format!("reply to request {id}, which is not awaiting a reply: {text}")));
        };
        let (result, error) = (frame.result.as_deref(), frame.error.as_deref());
        if result.is_some() == error.is_some() {
            return Err(breach("client_frame_json", format!("a reply must carry exactly one of result and error: {text}")));
        }
        match (req.kind, result) {
            (ReqKind::Initialize { named }, Some(result)) => {
                let init: InitializeResult = decode("initialize result", result)?;
                if init.protocol_version != "1.0.0" {
                    return Err(breach("client_handshake", format!("negotiated {}", init.protocol_version)));
                }
                // A snapshot only of what was named, in the order named.
                let mut rest = named.iter();
                for snapshot in &init.snapshots {
                    if !rest.any(|uri| *uri == snapshot.resource) {
                        return Err(breach("client_handshake", format!("snapshot of {} not named in {named:?}, or out of order", snapshot.resource)));
                    }
                }
                if self.may_read() && named.first().is_some_and(|u| u == ROOT_RESOURCE_URI) && init.snapshots.first().is_none_or(|s| s.resource != ROOT_RESOURCE_URI) {
                    return Err(breach("client_handshake", "the root was named and not answered".to_owned()));
                }
                self.ready = true;
                self.watermark = init.server_seq.max(0) as u64;
                for snapshot in init.snapshots {
                    self.seed_mirror(snapshot, true)?;
                }
                Ok(Vec::new())
            }
            (ReqKind::Initialize { .. }, None) => Err(breach("client_handshake", format!("initialize refused: {text}"))),
            (ReqKind::Reconnect, Some(result)) => {
                let result: ReconnectResult = decode("reconnect result", result)?;
                self.ready = true;
                match result {
                    ReconnectResult::Replay(replay) => {
                        self.stats.replays += 1;
                        for uri in &replay.missing {
                            self.mirrors.remove(uri);
                            if uri == ROOT_RESOURCE_URI {
                                self.rows = None;
                            }
                        }
                        for envelope in replay.actions {
                            self.on_envelope(envelope)?;
                        }
                    }
                    ReconnectResult::Snapshot(s) => {
                        // Snapshots are the new baseline: the watermark is
                        // theirs, not whatever was seen before.
                        if let Some(seq) = s.snapshots.iter().map(|s| s.from_seq.max(0) as u64).max() {
                            self.watermark = seq;
                        }
                        let fresh: BTreeSet<Uri> = s.snapshots.iter().map(|s| s.resource.clone()).collect();
                        self.mirrors.retain(|uri, _| fresh.contains(uri));
                        for snapshot in s.snapshots {
                            self.seed_mirror(snapshot, true)?;
                        }
                    }
                }
                Ok(Vec::new())
            }
            (ReqKind::Reconnect, None) => {
                // The host would not resume us: start over.
                Ok(vec![self.initialize(rng)])
            }
            (ReqKind::Subscribe { channel, full }, Some(result)) => {
                let result: SubscribeResult = decode("subscribe result", result)?;
                let Some(snapshot) = result.snapshot else {
                    return Err(breach("client_snapshot_shape", format!("subscribe to {channel} answered without a snapshot")));
                };
                if snapshot.resource != channel {
                    return Err(breach("client_snapshot_shape", format!("subscribe to {channel} answered with {}", snapshot.resource)));
                }
                self.seed_mirror(snapshot, full)?;
                Ok(Vec::new())
            }
            (ReqKind::List, Some(result)) => self.on_list_page(result, ctx),
            (ReqKind::Create { uri }, Some(_)) => {
                self.known.insert(uri);
                Ok(Vec::new())
            }
            (ReqKind::Peers, Some(result)) => {
                let result = value_of(result);
                let ok = result.get("enabled").is_some_and(Value::is_boolean)
                    && result.get("tier").and_then(Value::as_str).is_some_and(|t| matches!(t, "passive" | "warn" | "coordinate"))
                    && result.get("peers").is_some_and(Value::is_array)
                    && result.get("warnings").is_some_and(Value::is_array);
                if !ok {
                    return Err(breach("client_frame_json", format!("ahpd/listPeers answered {result}")));
                }
                Ok(Vec::new())
            }
            (ReqKind::CreateIn { uri, untrusted, worktree, bad_folder }, result) => {
                let code = error_code(error);
                // A URI already in use is refused first, at the edge, before
                // any folder is looked at (-32003, docs/DECISIONS.md 3): the
                // folder's and the trust check's refusals are owed for a
                // free URI only (100k-seed run, seeds 23013, 32282, ...).
                let uri_taken = code == Some(-32003);
                // Refused for the folder (-32602), its trust (-32009), or
                // because the folder could not be looked at (-32603: the
                // shell's `Inspect` did not run, `folders::unread`); never
                // made (100k-seed run, seeds 32282, 60540, 64275, 91642).
                if bad_folder && !uri_taken && !matches!(code, Some(-32602 | -32009 | -32603)) {
                    return Err(breach("folder_refusal", format!("createSession of {uri} in a folder that is not a directory was answered {text}")));
                }
                if untrusted == Some(true) && !uri_taken && code != Some(-32009) {
                    return Err(breach("trust_refusal", format!("createSession of {uri} in an untrusted folder was answered {text}")));
                }
                // A refusal of the grants table is -32009 too: only a
                // client that may create is owed a trusted folder's session.
                let may_create = !self.users_host || self.signer.as_ref().is_some_and(|s| s.writes());
                if untrusted == Some(false) && code == Some(-32009) && may_create {
                    return Err(breach("trust_refusal", format!("createSession of {uri} in a trusted folder was refused: {text}")));
                }
                if result.is_some() {
                    self.known.insert(uri.clone());
                    if worktree {
                        self.worktree_creating.push(uri.clone());
                        if self.worktree_creating.len() > 8 {
                            self.worktree_creating.remove(0);
                        }
                        // Sometimes the window cuts a tree for it at once.
                        if rng.chance(0.4) {
                            let params = json!({"session": uri, "prompt": format!("Fix the thing c{}", self.index)});
                            return Ok(vec![self.send_request("vscode/createAgentHostDetachedWorktree", params, ReqKind::Detached)]);
                        }
                    }
                }
                Ok(Vec::new())
            }
            (ReqKind::Detached, Some(result)) => {
                let result = value_of(result);
                if let (Some(h), Some(r)) = (result.get("handle").and_then(Value::as_str), result.get("resource").and_then(Value::as_str)) {
                    self.handles.push((h.to_owned(), r.to_owned()));
                    self.learn_trees(&[r.to_owned()]);
                }
                Ok(Vec::new())
            }
            (ReqKind::List, None) => {
                let walk = self.walk.take();
                if !self.may_read() {
                    // Refused: a connection not signed in reads nothing.
                    return Ok(Vec::new());
                }
                Err(breach("client_list_walk", format!("a page of a walk was refused ({} pages in): {text}", walk.map_or(0, |w| w.pages))))
            }
            (ReqKind::Auth, None) => Err(breach("client_auth", format!("client {} was refused its own token: {text}", self.index))),
            (ReqKind::Expect { code }, result) => {
                let got = error_code(error);
                if result.is_some() || got != Some(code) {
                    return Err(breach("client_expected_error", format!("client {} {} answered {text}, not error {code}", self.index, req.method)));
                }
                Ok(Vec::new())
            }
            (ReqKind::Mine { empty: true }, Some(result)) => {
                if value_of(result).get("items").and_then(Value::as_array).is_some_and(|rows| !rows.is_empty()) {
                    return Err(breach("owner_filter", format!("a host with no users directory answered rows to ahpd.owner=me: {text}")));
                }
                Ok(Vec::new())
            }
            _ => Ok(Vec::new()),
        }
    }

    fn seed_mirror(&mut self, snapshot: Snapshot, full: bool) -> Result<(), Violation> {
        let kind = channel_kind(&snapshot.resource);
        let state = match (kind, snapshot.state) {
            ("root", SnapshotState::Root(r)) => MirrorState::Root(r),
            ("session", SnapshotState::Session(s)) => MirrorState::Session(s),
            ("chat", SnapshotState::Chat(c)) => MirrorState::Chat(c),
            (kind, other) => {
                return Err(breach("client_snapshot_shape", format!(
                    "snapshot of {} ({kind}) decoded as {:?}",
                    snapshot.resource,
                    std::mem::discriminant(&other)
                )))
            }
        };
        if let MirrorState::Session(s) = &state {
            self.learn_trees(s.working_directories.as_deref().unwrap_or_default());
        }
        let from_seq = snapshot.from_seq.max(0) as u64;
        self.watermark = self.watermark.max(from_seq);
        if snapshot.resource == ROOT_RESOURCE_URI {
            // A new root subscription: the rows must be listed again.
            self.rows = None;
        }
        self.mirrors.insert(snapshot.resource, Mirror { state, full, from_seq });
        Ok(())
    }

    /// A notification, `params` its raw JSON text (`null` when absent).
    fn on_notification(&mut self, method: &str, params: &str, ctx: &ClientCtx<'_>) -> Result<(), Violation> {
        let _ = ctx;
        match method {
            "action" => {
                let envelope: ActionEnvelope = decode("action envelope", params)?;
                self.on_envelope(envelope)
            }
            "root/sessionAdded" => {
                let p: SessionAddedParams = decode("root/sessionAdded", params)?;
                // The row is kept as JSON: read as a Value only when kept.
                if let Some(rows) = self.rows_mut() {
                    if let Some(row) = value_of(params).get_mut("summary").map(Value::take) {
                        rows.insert(p.summary.resource.clone(), row);
                    }
                }
                self.known.insert(p.summary.resource);
                Ok(())
            }
            "root/sessionRemoved" => {
                let p: SessionRemovedParams = decode("root/sessionRemoved", params)?;
                if let Some(rows) = self.rows_mut() {
                    rows.remove(&p.session);
                }
                self.known.remove(&p.session);
                Ok(())
            }
            "root/sessionSummaryChanged" => {
                let p: SessionSummaryChangedParams = decode("root/sessionSummaryChanged", params)?;
                // Read as a Value only when there is a row to change.
                if !self.current_rows().and_then(|rows| rows.get(&p.session)).is_some_and(Value::is_object) {
                    return Ok(());
                }
                let changes = match value_of(params).get_mut("changes").map(Value::take) {
                    Some(Value::Object(changes)) => changes,
                    _ => serde_json::Map::new(),
                };
                if let Some(row) = self.rows_mut().and_then(|rows| rows.get_mut(&p.session)).and_then(Value::as_object_mut) {
                    // "omitted fields are unchanged"; an activity of ""
                    // is none (docs/DECISIONS.md, 7).
                    for (key, value) in changes {
                        if value.is_null() || (key == "activity" && value.as_str() == Some("")) {
                            row.remove(&key);
                        } else {
                            row.insert(key, value);
                        }
                    }
                }
                Ok(())
            }
            other => Err(breach("client_frame_json", format!("unexpected notification {other}"))),
        }
    }

    /// Rule 1 (serverSeq increases per connection), then the reducer.
    fn on_envelope(&mut self, envelope: ActionEnvelope) -> Result<(), Violation> {
        if envelope.server_seq <= self.conn_last_seq {
            return Err(breach("rule1_server_seq_increases", format!(
                "client {} got serverSeq {} after {} on {}",
                self.index, envelope.server_seq, self.conn_last_seq, envelope.channel
            )));
        }
        self.conn_last_seq = envelope.server_seq;
        self.watermark = self.watermark.max(envelope.server_seq);
        if matches!(envelope.action, StateAction::Unknown(_)) {
            return Err(breach("client_frame_json", format!("host sent an action the 1.0.0 types cannot read on {}", envelope.channel)));
        }
        if envelope.rejection_reason.is_some() {
            self.stats.rejected += 1;
            return Ok(());
        }
        if let StateAction::SessionWorkingDirectoryReplaced(a) = &envelope.action {
            self.learn_trees(std::slice::from_ref(&a.replacement));
        }
        let Some(mirror) = self.mirrors.get_mut(&envelope.channel) else { return Ok(()) };
        if envelope.server_seq <= mirror.from_seq {
            return Err(breach("rule1_server_seq_increases", format!(
                "envelope {} on {} is not newer than its snapshot ({})",
                envelope.server_seq, envelope.channel, mirror.from_seq
            )));
        }
        let outcome = match &mut mirror.state {
            MirrorState::Root(r) => apply_action_to_root(r, &envelope.action),
            MirrorState::Session(s) => apply_action_to_session(s, &envelope.action),
            MirrorState::Chat(c) => apply_action_to_chat(c, &envelope.action),
        };
        self.stats.applied += 1;
        match outcome {
            ReduceOutcome::Invalid(_) | ReduceOutcome::OutOfScope if mirror.full => Err(breach(
                "rule3_mirror_matches_host",
                format!("client {} could not apply envelope {} on {}: {outcome:?}", self.index, envelope.server_seq, envelope.channel),
            )),
            _ => Ok(()),
        }
    }

    /// One page of a walk: no URI twice (unless removed and made anew in
    /// between), rows in catalogue order, at most `limit` rows, a cursor only
    /// on a full page, and a walk that ends.
    fn on_list_page(&mut self, result: &str, ctx: &ClientCtx<'_>) -> Result<Vec<ClientOut>, Violation> {
        let page: ListSessionsResult = decode("listSessions result", result)?;
        if let (Some(root), Some(walk)) = (self.mirrors.get(ROOT_RESOURCE_URI), self.walk.as_ref()) {
            if root.full && walk.limit.is_none() && walk.pages == 0 && page.next_cursor.is_none() {
                // The rows are kept as JSON.
                let result = value_of(result);
                let rows = result.get("items").and_then(Value::as_array).map(|items| {
                    items.iter().filter_map(|r| Some((r.get("resource")?.as_str()?.to_owned(), r.clone()))).collect()
                });
                self.rows = rows.map(|rows| RowMirror { root_from_seq: root.from_seq, rows });
            }
        }
        let Some(mut walk) = self.walk.take() else {
            return Err(breach("client_list_walk", "a listSessions page with no walk in progress".to_owned()));
        };
        walk.pages += 1;
        if let Some(limit) = walk.limit {
            if page.items.len() as i64 > limit {
                return Err(breach("client_list_walk", format!("{} rows for limit {limit}", page.items.len())));
            }
        }
        let mut previous: Option<(i64, &str)> = None;
        for row in &page.items {
            let incarnation = ctx.incarnations.get(&row.resource).copied().unwrap_or(0);
            if walk.seen.insert(row.resource.clone(), incarnation) == Some(incarnation) {
                return Err(breach("client_list_walk", format!("page {} repeats {}", walk.pages, row.resource)));
            }
            let Some(modified) = WallTime::parse_iso(&row.modified_at) else {
                return Err(breach("client_list_walk", format!("row {} has modifiedAt {:?}", row.resource, row.modified_at)));
            };
            if WallTime::parse_iso(&row.created_at).is_none() {
                return Err(breach("client_list_walk", format!("row {} has createdAt {:?}", row.resource, row.created_at)));
            }
            if let Some((m, u)) = previous {
                if (std::cmp::Reverse(m), u) >= (std::cmp::Reverse(modified.0), row.resource.as_str()) {
                    return Err(breach("client_list_walk", format!("rows out of order: {u} then {}", row.resource)));
                }
            }
            previous = Some((modified.0, row.resource.as_str()));
            self.known.insert(row.resource.clone());
        }
        if let (Some(_), Some(limit)) = (&page.next_cursor, walk.limit) {
            let limit = limit.min(ctx.list_limit_max as i64);
            if (page.items.len() as i64) < limit {
                return Err(breach("client_list_walk", format!("a cursor after a short page ({} of {limit})", page.items.len())));
            }
        }
        if walk.pages > 2_000 {
            return Err(breach("client_list_walk", format!("the walk did not end after {} pages", walk.pages)));
        }
        match page.next_cursor {
            Some(cursor) => {
                self.walk = Some(walk);
                Ok(vec![self.list_page(Some(cursor))])
            }
            None => {
                self.stats.walks += 1;
                Ok(Vec::new())
            }
        }
    }
}

/// Whether `folder` (a `file:` URI of the machine) is inside one of the
/// trusted folders `list` (the core's own rule, `ahpd_core::trust`).
/// Every how many sessions a client asks for outside a folder names a
/// folder that must be refused instead.
const BAD_FOLDER_EVERY: u64 = 12;

/// The `n`th bad `workingDirectories` (issue 25): a bare path, another
/// scheme, a folder that does not exist, a file, and (on an agent that
/// takes peers, where they are kept) a peer that does not exist.
fn bad_folders(n: u64, peers: bool) -> Value {
    let missing = format!("file://{}", crate::git::MISSING_FOLDER);
    match n % 5 {
        0 => json!(["/work/a"]),
        1 => json!(["http://example.com/work/a"]),
        3 => json!([format!("file://{}", crate::git::A_FILE)]),
        4 if peers => json!(["file:///work/a", format!("{missing}/sub")]),
        _ => json!([missing]),
    }
}

fn trusted_by(list: &[String], folder: &str) -> bool {
    ahpd_core::trust::Trust::of(list).check(folder, &[]).is_ok()
}

/// Decodes `raw`, a payload's JSON text, as an ahp-types value.
fn decode<T: serde::de::DeserializeOwned>(what: &str, raw: &str) -> Result<T, Violation> {
    // Straight from the text (this runs for every frame): for a text with
    // no key given twice (serde_json never writes one twice) it is the
    // value decoding the Value gave. When that fails, decoding the Value,
    // as the clients did, gives the same answer and the words the rule has
    // always quoted.
    serde_json::from_str(raw).or_else(|_| {
        let value = value_of(raw);
        T::deserialize(&value).map_err(|e| breach("client_frame_json", format!("{what} does not decode as ahp-types 1.0.0: {e}: {value}")))
    })
}

/// A payload's JSON text as a `Value`, where one is wanted (the text was
/// read as JSON already).
fn value_of(raw: &str) -> Value {
    serde_json::from_str(raw).unwrap_or_default()
}

/// An error reply's `code`, when it has an integer one.
fn error_code(error: Option<&str>) -> Option<i64> {
    error.and_then(|e| value_of(e).get("code").and_then(Value::as_i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The frames written by hand are the text the `json!` objects made.
    #[test]
    fn frames_are_written_as_json_objects_are() {
        let params = json!({"channel": "ahp-chat:/x", "message": {"text": "a \"b\"\n\u{1}é", "n": [1, -2.5, null]}});
        assert_eq!(request(7, "vscode/createAgentHostDetachedWorktree", params.clone()), json!({"jsonrpc": "2.0", "id": 7, "method": "vscode/createAgentHostDetachedWorktree", "params": params}).to_string());
        assert_eq!(request(u64::MAX, "a\"b", Value::Null), json!({"jsonrpc": "2.0", "id": u64::MAX, "method": "a\"b", "params": null}).to_string());
        let mut client = Client::new(3);
        client.client_seq = -5;
        let channel = "ahp-chat:/ahp-session@s1\t";
        let ClientOut::Frame(text) = client.dispatch(channel, params.clone()) else { panic!("a frame") };
        assert_eq!(text, json!({"jsonrpc": "2.0", "method": "dispatchAction", "params": {"channel": channel, "clientSeq": -4, "action": params}}).to_string());
    }
}
