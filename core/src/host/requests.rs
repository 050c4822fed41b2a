//! What clients ask of sessions: the session commands and client-dispatched
//! actions, each sequenced with what reaches past one session (the
//! catalogue, residency, trees, what waits).
//!
//! ## Session commands
//!
//! Session commands (Sessions page, "Commands"): `createSession`,
//! `disposeSession`, `listSessions`, `fetchTurns`, and a session's further
//! chats, `createChat` ("a second conversation in the session") and
//! `disposeChat` ("end one chat; the session's default chat is kept").
//! `resolveSessionConfig` and `sessionConfigCompletions` are checked here
//! and answered by the trees (`host/git.rs`). `moveChat` reorders a
//! session's chats or moves one to another session in two writes (the
//! section "Moving a chat" below; each session's part is
//! `session/moves.rs`).
//!
//! ## Client-dispatched actions
//!
//! Client-dispatched actions (`dispatchAction`), write-ahead
//! (docs/REFERENCE-NOTES.md, AHP 5; docs/DECISIONS.md, 2): validate against the
//! current state, make what the host stores durable, then apply with the
//! protocol's reducer, stamp `serverSeq` and echo with the client's origin,
//! or echo unapplied with a `rejectionReason`.

use ahp_types::actions::{ActionEnvelope, ActionOrigin, ChatTurnStartedAction, ChatTurnsLoadedAction, StateAction};
use ahp_types::commands::{ChatMoveDestination, CreateChatParams, CreateSessionParams, DispatchActionParams, DisposeChatParams, DisposeSessionParams, FetchTurnsParams, ListSessionsParams, MoveChatParams, MoveChatResult, ResolveSessionConfigParams, SessionConfigCompletionsParams};
use ahp_types::state::Message;
use ahp_types::{ROOT_RESOURCE_URI, Uri};
use serde_json::Value;
use crate::protocol::params as parse;
use super::{Host, Op};
use crate::continuation::{CreateChatReq, CreateSessionReq, DisposeChatReq, FetchTurnsReq, MoveChatReq, QueuedCommand, ResolveReq, WaitingRequest};
use crate::effect::{ConnId, LogLevel, OpId, Outbound};
use crate::input::Outcome;
use crate::grants::{Operation, Principal};
use crate::ids::{ResourceId, printable};
use crate::protocol::error::*;
use crate::record::{ChatRecord, SessionRecord};
use crate::session::{MoveWork, ParkedWork, Phase, Queued, QueuedAction, Session, Waiter};
use crate::session::actions::{ActionNext, ActionRules, Admission};

/// -32010: the chat URI is taken.
const ALREADY_EXISTS: i32 = -32010;

impl Host {
    /// Sends a rejected client action back to the client that sent it,
    /// unapplied, with its reason (docs/REFERENCE-NOTES.md, AHP 5, step 4).
    pub(crate) fn reject(&mut self, conn: ConnId, channel: &Uri, action: StateAction, origin: Option<ActionOrigin>, reason: String) {
        self.shared.stats.rejections += 1;
        self.shared.server_seq += 1;
        let envelope = ActionEnvelope {
            channel: channel.clone(),
            action,
            server_seq: self.shared.server_seq,
            origin,
            rejection_reason: Some(reason.clone()),
        };
        self.shared.send(conn, Outbound::Action(std::sync::Arc::new(crate::effect::Broadcast::new(envelope))));
        crate::mark!("action_rejected");
        self.shared.log(LogLevel::Warn, "action.rejected", self.session_of(channel), reason);
    }

    /// `createSession` (Sessions page, "The life of a session"): the URI is
    /// the client's; the default chat is the host's; the backend is started
    /// and told the client's name, and only then is the reply sent. A
    /// refusal at any step leaves no session behind. The session is
    /// provisional (`creating`, unlisted, unannounced) until its first turn.
    ///
    /// The config is settled first: a session in a local folder waits for
    /// the facts of its folder's repository ([`Host::create_with_facts`]
    /// goes on when they come), the way `resolveSessionConfig` does.
    pub(crate) fn on_create_session(&mut self, conn: ConnId, id: u64, params: Value) {
        let params: CreateSessionParams = match parse(params) {
            Ok(p) => p,
            Err(e) => return self.shared.reply_error(conn, id, e),
        };
        if let Err(e) = self.shared.authorize(conn, Operation::SessionCreate) {
            return self.shared.reply_error(conn, id, e);
        }
        let session = match ResourceId::parse(&params.channel) {
            Ok(r) => r,
            Err(e) => return self.shared.reply_error(conn, id, error(INVALID_PARAMS, format!("invalid session URI: {e}"))),
        };
        // The provider and the folders the session would keep, settled once
        // here for both halves of the request.
        let provider = params.provider.or_else(|| self.shared.config.agents.first().map(|a| a.provider.clone()));
        let takes_peers = self.shared.agent_takes_peers(provider.as_deref().unwrap_or_default());
        let kept = crate::folders::initial(params.working_directories.as_deref().unwrap_or_default(), takes_peers);
        let request = CreateSessionReq { session, provider, working_directories: params.working_directories, kept, config: params.config };
        // No agent, and no git, in a folder the operator did not trust.
        if let Err(e) = self.create_trusted(&request) {
            return self.shared.reply_error(conn, id, e);
        }
        // Only `file:` URIs of local folders (issue 25): the folders the
        // session keeps, since a backend without peers ignores the rest
        // (AHP: "treats only the first entry as the session's working
        // directory and ignores the rest").
        if let Err(reason) = crate::folders::check_uris(&request.kept) {
            self.shared.log(LogLevel::Warn, "session.folder_refused", Some(request.session.uri()), reason.clone());
            return self.shared.reply_error(conn, id, error(INVALID_PARAMS, reason));
        }
        // The folders' kinds come back with the repository's facts; the
        // create goes on in `create_with_facts`.
        let mut paths = request.kept.iter().filter_map(|f| crate::git::path_of_uri(f));
        match paths.next() {
            Some(folder) => {
                let also = paths.collect();
                let purpose = super::GitOp::Create { conn, id, request: Box::new(request) };
                self.shared.git(Op::Git(purpose), crate::git::GitCmd::Inspect { folder, also });
            }
            None => self.create_with_facts(conn, id, request, Ok(crate::git::RepoFacts::not_a_repo())),
        }
    }

    /// Whether a `createSession` may make a session in its folders (the
    /// Sessions page's trust rule, [`Host::trusted`]); the refusal is
    /// logged and is the error the client gets.
    fn create_trusted(&mut self, request: &CreateSessionReq) -> Result<(), ahp_types::messages::JsonRpcError> {
        let Err(reason) = self.trusted(request.working_directories.as_deref().unwrap_or_default()) else { return Ok(()) };
        crate::mark!("create_refused_untrusted_folder");
        self.shared.log(LogLevel::Warn, "session.untrusted_folder", Some(request.session.uri()), reason.clone());
        Err(error(PERMISSION_DENIED, reason))
    }

    /// `createSession` once its folder's repository `facts` are known: the
    /// config is settled against them, then the policy store is asked, and
    /// only then is the session made and its backend started (Sessions
    /// page, "The life of a session"). `request` was decoded and its URI
    /// checked when it came ([`Host::on_create_session`]). `facts` is `Err`
    /// when the folders could not be looked at (the `Inspect` did not run,
    /// `git::folder_facts`): refused, since nothing says they are
    /// directories.
    pub(crate) fn create_with_facts(&mut self, conn: ConnId, id: u64, request: CreateSessionReq, facts: Result<crate::git::RepoFacts, String>) {
        // The connection that asked left while its folder was read: nobody
        // is there to answer, and its principal, the owner the session
        // would be written with ("written when the session opens"), is
        // gone with it. A create that cannot be answered makes nothing (a
        // session made then was nobody's on a users host: sim issue 18).
        if !self.shared.conns.contains_key(&conn) {
            let uri = Some(printable(&request.session.uri()));
            self.shared.log(LogLevel::Info, "session.create_abandoned", uri, "the connection that asked is gone".to_owned());
            return;
        }
        // Asked again: the host tree that made the folder trusted may have
        // gone while its repository was read (sim seed 806).
        if let Err(e) = self.create_trusted(&request) {
            return self.shared.reply_error(conn, id, e);
        }
        // Folders nobody could look at (the shell's `Inspect` did not run)
        // may be anything: no session is made in them (issue 25; sim seed
        // 32282 made one in a folder that does not exist).
        let facts = match facts {
            Ok(facts) => facts,
            Err(message) => {
                let reason = crate::folders::unread(&request.kept, &message);
                self.shared.log(LogLevel::Warn, "session.folder_refused", Some(request.session.uri()), reason.clone());
                return self.shared.reply_error(conn, id, error(INTERNAL_ERROR, reason));
            }
        };
        let facts = &facts;
        // A folder the shell found is not a directory (issue 25).
        if let Err(reason) = crate::folders::check_kinds(&request.kept, facts) {
            self.shared.log(LogLevel::Warn, "session.folder_refused", Some(request.session.uri()), reason.clone());
            return self.shared.reply_error(conn, id, error(INVALID_PARAMS, reason));
        }
        let scope = match self.resolve_scope(conn, request.config.as_ref()) {
            Ok(s) => s,
            Err(e) => return self.shared.reply_error(conn, id, e),
        };
        let rid = &request.session;
        // The policy store is asked about the harness and the machine before
        // anything exists: a refusal is a session that never existed.
        let principal = self.shared.conns.get(&conn).and_then(|c| c.principal.clone());
        let folder = request.working_directories.as_ref().and_then(|d| d.first().cloned());
        if let Err(reason) = self.shared.config.policy.check(principal.as_ref(), request.provider.as_deref().unwrap_or_default(), folder.as_deref()) {
            crate::mark!("create_refused_by_policy");
            self.shared.log(LogLevel::Warn, "session.policy_refused", Some(rid.uri()), reason.clone());
            return self.shared.reply_error(conn, id, error(PERMISSION_DENIED, reason));
        }
        let uri = rid.uri();
        let default_chat = rid.default_chat_uri();
        if self.sessions.contains_key(&uri) || self.shared.chats.contains_key(&default_chat) {
            return self.shared.reply_error(conn, id, error(SESSION_ALREADY_EXISTS, format!("session {uri} already exists")));
        }
        // One resource per URI: a chat's URI is not free for a session.
        if self.shared.chats.contains_key(&uri) {
            return self.shared.reply_error(conn, id, error(SESSION_ALREADY_EXISTS, format!("{uri} is already a chat's URI")));
        }
        let Some(provider) = request.provider else {
            return self.shared.reply_error(conn, id, error(PROVIDER_NOT_FOUND, "no agent is configured"));
        };
        if !self.shared.config.agents.iter().any(|a| a.provider == provider) {
            return self.shared.reply_error(conn, id, error(PROVIDER_NOT_FOUND, format!("no agent with provider {}", printable(&provider))));
        }
        // The config, settled against the folder's repository.
        let asked: serde_json::Map<String, Value> = request.config.unwrap_or_default().into_iter().collect();
        let memberships = super::git::memberships_of(&self.shared, conn);
        let (config, offer) = crate::session_config::settle(&asked, facts, memberships.as_deref());
        let in_tree = self.detached.tree_of(request.working_directories.as_deref().and_then(|d| d.first()));
        // The first is the process root; the rest are peers, kept only when
        // the agent advertises multipleWorkingDirectories (docs/REFERENCE-NOTES.md,
        // AHP 6: otherwise "the server uses only the first"): `kept`.
        let record = SessionRecord::new_session(rid, provider.into(), request.kept, config, offer, self.shared.owner_of(conn), scope, in_tree, self.shared.now.wall);
        // A session made anew under a disposed one's URI: its record
        // replaces the tombstone.
        self.tombstones.remove(&uri);
        let can_resume = self.shared.agent_can_resume(&record.provider);
        let session = Session::provisional(record, crate::session::Asker::Client { conn, id }, can_resume, &self.shared);
        self.add_session(uri.clone(), session);
        self.index_chat(default_chat, &uri);
        self.in_session(&uri, |s, sh| s.start_default_agent(sh));
        self.shared.log(LogLevel::Info, "session.creating", Some(uri), String::new());
    }

    /// `disposeSession`: checks first, then tears each chat's agent down and
    /// asks the backend to delete its copy, then drops the record and tells
    /// every client (Sessions page, "The life of a session").
    pub(crate) fn on_dispose_session(&mut self, conn: ConnId, id: u64, params: Value) {
        let params: DisposeSessionParams = match parse(params) {
            Ok(p) => p,
            Err(e) => return self.shared.reply_error(conn, id, e),
        };
        if let Err(e) = self.shared.authorize(conn, Operation::SessionDispose) {
            return self.shared.reply_error(conn, id, e);
        }
        if let Err(e) = ResourceId::parse(&params.channel) {
            return self.shared.reply_error(conn, id, error(INVALID_PARAMS, format!("invalid session URI: {e}")));
        }
        let uri = params.channel;
        let Some(session) = self.sessions.get(&uri) else {
            return self.shared.reply_error(conn, id, error(SESSION_NOT_FOUND, format!("no session {uri}")));
        };
        // Deleting is the owner's or an administrator's (Sessions page,
        // "Whose it is"); a host with no users directory refuses nobody.
        if self.shared.config.users.is_some() {
            let principal = self.shared.conns.get(&conn).and_then(|c| c.principal.as_ref());
            let admin = principal.is_some_and(|p| p.is_administrator());
            if !admin && session.record().owner.as_deref() != principal.map(|p| p.owner()).as_deref() {
                crate::mark!("dispose_refused_not_owner");
                self.shared.log(LogLevel::Warn, "session.dispose_refused", Some(uri.clone()), format!("connection {} is not the owner", conn.0));
                return self.shared.reply_error(conn, id, error(PERMISSION_DENIED, "Only the session's owner can delete it."));
            }
        }
        if self.moving(&uri) {
            crate::mark!("dispose_refused_moving");
            return self.shared.reply_error(conn, id, error(INVALID_PARAMS, format!("a chat is moving into or out of session {uri}: dispose it once moveChat has answered")));
        }
        let Some(session) = self.sessions.get(&uri) else { return };
        match session.phase() {
            Phase::Disposing(_) => {
                return self.shared.reply_error(conn, id, error(SESSION_NOT_FOUND, format!("session {uri} is already being disposed")))
            }
            Phase::Starting(_) => {
                return self.shared.reply_error(conn, id, error(INVALID_PARAMS, format!("session {uri} is still being created; dispose it once createSession has answered")))
            }
            _ => {}
        }
        let waiters = self.sessions.get_mut(&uri).map(|s| s.take_waiters()).unwrap_or_default();
        self.fail_waiters(&uri, waiters, "the session is being disposed");
        self.in_session(&uri, |s, sh| s.begin_dispose(sh, conn, id));
    }

    /// Second step of a dispose, once its tombstone is durable (or the
    /// store refused it): the backend's conversations and the session's
    /// git refs and tree go; the dispose ends when each answered
    /// ([`Host::dispose_finish`]). A store failure ends it at once, the
    /// session kept.
    pub(crate) fn dispose_stored(&mut self, uri: &Uri, store_error: Option<String>) {
        let Some(session) = self.sessions.get(uri) else { return };
        if !matches!(session.phase(), Phase::Disposing(_)) {
            return;
        }
        if store_error.is_some() {
            return self.dispose_finish(uri, store_error);
        }
        let mut ops = self.in_session(uri, |s, sh| s.delete_conversations(sh)).unwrap_or_default();
        ops.extend(self.trees().dispose(uri));
        let done = ops.is_empty();
        if let Some(s) = self.sessions.get_mut(uri) {
            s.dispose_waits_for(ops);
        }
        if done {
            self.dispose_finish(uri, None);
        }
    }

    /// Last step of a dispose: forget the session, end subscriptions to it,
    /// tell root subscribers (only if it was ever announced) and reply; or,
    /// when the store refused the tombstone, keep it and say so.
    pub(crate) fn dispose_finish(&mut self, uri: &Uri, store_error: Option<String>) {
        let Some(session) = self.sessions.get(uri) else { return };
        let (conn, id) = match &session.phase() {
            Phase::Disposing(owed) => match owed.client() {
                Some(asker) => asker,
                None => return,
            },
            _ => return,
        };
        if let Some(message) = store_error {
            let running = self.in_session(uri, |s, sh| s.dispose_refused_by_store(sh, &message)).unwrap_or_default();
            for (chat, turn_id) in running {
                self.fail_turn(uri, &chat, &turn_id, "the session's agent was stopped by a dispose that did not finish");
            }
            // What changed while the dispose was under way was not written.
            self.store_put(uri);
            self.tell(crate::facts::Fact::DisposeRefused { session: uri });
            return;
        }
        let Some(session) = self.drop_session(uri) else { return };
        self.tell(crate::facts::Fact::Disposed { session: uri, record: session.record() });
        // Only passes asked from now on speak for the tombstone.
        let since = crate::effect::OpId(self.shared.next_op);
        self.tombstones.insert(uri.clone(), super::Tombstone::after(crate::session::dispose::tombstone_of(session.record()), since));
        self.shared.catalogue.remove(session.modified_at().0, uri);
        let mut channels = vec![uri.clone()];
        for chat in &session.record().chats {
            self.shared.chats.remove(&chat.resource);
            channels.push(chat.resource.clone());
        }
        self.shared.retired.extend(channels.iter().cloned());
        // Never replayed again (a retired channel is answered with
        // snapshots): its envelopes, a client's big messages among them,
        // go now rather than when the window passes them (issue 25).
        let forgotten = self.shared.replay.forget(&channels);
        for c in self.shared.conns.values_mut() {
            for ch in &channels {
                c.subscriptions.remove(ch);
            }
        }
        let shown = session.is_announced() && self.shared.shows(session.record(), session.modified_at());
        if shown {
            let params = ahp_types::notifications::SessionRemovedParams {
                channel: ROOT_RESOURCE_URI.to_owned(),
                session: uri.clone(),
            };
            self.shared.notify_root("root/sessionRemoved", serde_json::to_value(params).unwrap_or_default());
        } else if !session.is_announced() {
            // "One removed before it is announced goes without a
            // root/sessionRemoved."
            crate::mark!("dispose_provisional_unannounced");
        }
        self.recount_active();
        self.shared.reply(conn, id, Value::Null);
        self.shared.log(LogLevel::Info, "session.disposed", Some(uri.clone()), String::new());
        let worked_in_trees = !session.record().working_directories.is_empty();
        // Its state and envelopes are freed by the shell, off this thread.
        self.shared.effects.push(crate::effect::Effect::Release(crate::effect::Released::new((session, forgotten))));
        if worked_in_trees {
            // Trees it worked in that an archived session kept for it.
            self.trees().trees_freed();
        }
    }

    /// A chat's conversation was deleted for `disposeSession` (or the
    /// backend failed to: logged, the dispose goes on): the dispose
    /// finishes once every delete it asked for answered.
    pub(crate) fn on_conversation_deleted(&mut self, session_uri: &Uri, op: OpId, outcome: Outcome) {
        if let Outcome::Failed { message } = &outcome {
            self.shared.log(LogLevel::Warn, "backend.delete_failed", Some(session_uri.clone()), message.clone());
        }
        let Some(s) = self.sessions.get_mut(session_uri) else { return };
        if s.dispose_step_done(op) {
            self.dispose_finish(session_uri, None);
        }
    }

    /// `listSessions`: announced sessions, most recently modified first,
    /// ties broken by URI. A limit is capped at `list_limit_max`; no limit
    /// means the whole catalogue up to `list_default_max` rows.
    pub(crate) fn on_list_sessions(&mut self, conn: ConnId, id: u64, params: Value) {
        let params: ListSessionsParams = match parse(params) {
            Ok(p) => p,
            Err(e) => return self.shared.reply_error(conn, id, e),
        };
        if let Err(e) = self.shared.authorize(conn, Operation::SessionList) {
            return self.shared.reply_error(conn, id, e);
        }
        let owner_filter = match params.meta.as_ref().and_then(|m| m.get("ahpd.owner")) {
            None => None,
            Some(Value::String(me)) if me == "me" => Some(self.shared.owner_of(conn)),
            Some(other) => {
                return self.shared.reply_error(conn, id, error(INVALID_PARAMS, format!("_meta[\"ahpd.owner\"] must be \"me\", not {other}")))
            }
        };
        self.finder().note_first_listing();
        let external = self.shared.external_filter();
        match crate::catalogue::list(&self.shared.catalogue, &self.sessions, &params, &self.shared.config, owner_filter.as_ref(), &external) {
            Ok(result) => {
                if result.hidden_external > 0 {
                    crate::mark!("list_hid_external_logged");
                    self.shared.log(LogLevel::Info, "catalogue.external_hidden", None, format!(
                        "showExternalSessions={} hid {} external sessions", self.shared.external_mode().name(), result.hidden_external
                    ));
                }
                if result.overflowed {
                    crate::mark!("list_default_truncated_logged");
                    self.shared.log(LogLevel::Warn, "catalogue.truncated", None, format!(
                        "listSessions without a limit answered {} rows of a larger catalogue", result.rows
                    ));
                }
                self.shared.send(conn, crate::effect::Outbound::Result { id, result: crate::effect::ResultBody::Encoded(result.page) });
                self.finder().refresh_if_stale();
            }
            Err(e) => self.shared.reply_error(conn, id, e),
        }
    }

    /// `fetchTurns`: older turns, dispatched as `chat/turnsLoaded` on the
    /// chat channel (so every watcher gets the page) before the reply. No
    /// cursor means the newest page; `before:<turnId>` the page that ends
    /// just before that turn. A cursor naming no turn is -32602.
    pub(crate) fn on_fetch_turns(&mut self, conn: ConnId, id: u64, params: Value) {
        let params: FetchTurnsParams = match parse(params) {
            Ok(p) => p,
            Err(e) => return self.shared.reply_error(conn, id, e),
        };
        self.fetch_turns(conn, id, FetchTurnsReq { chat: params.channel, cursor: params.cursor });
    }

    /// [`Host::on_fetch_turns`] from its decoded request: at arrival, and
    /// again when the wake it waited for ends (the grant and the state are
    /// read anew then).
    pub(crate) fn fetch_turns(&mut self, conn: ConnId, id: u64, request: FetchTurnsReq) {
        if let Err(e) = self.shared.authorize(conn, Operation::ChatTurns) {
            return self.shared.reply_error(conn, id, e);
        }
        let Some(session_uri) = self.shared.chats.get(&request.chat).map(|u| u.to_string()) else {
            return self.shared.reply_error(conn, id, error(SESSION_NOT_FOUND, format!("no chat {}", printable(&request.chat))));
        };
        let Some(session) = self.sessions.get_mut(&session_uri) else { return };
        if matches!(session.phase(), Phase::Disposing(_)) {
            // Nothing would wake it to answer a waiter: refuse now, as
            // `subscribe` does.
            return self.shared.reply_error(conn, id, error(SESSION_NOT_FOUND, "the session is being disposed"));
        }
        let Some(resident) = session.resident() else {
            crate::mark!("fetch_turns_wakes_session");
            session.wait(Waiter::Request { conn, id, request: WaitingRequest::FetchTurns(request) });
            self.wake(&session_uri);
            return;
        };
        let Some(chat) = resident.chats.get(&request.chat) else {
            return self.shared.reply_error(conn, id, error(SESSION_NOT_FOUND, "no such chat"));
        };
        let end = match request.cursor.as_deref() {
            None => chat.turns.len(),
            Some(cursor) => {
                let found = crate::cursor::turn_named(cursor).and_then(|turn_id| chat.turns.iter().position(|t| t.id == turn_id));
                match found {
                    Some(i) => i,
                    None => return self.shared.reply_error(conn, id, error(INVALID_PARAMS, "unknown fetchTurns cursor")),
                }
            }
        };
        let start = end.saturating_sub(self.shared.config.turns_page_len.max(1));
        let turns = chat.turns[start..end].to_vec();
        let next = (start > 0).then(|| crate::cursor::turns_before(&chat.turns[start].id));
        let action = StateAction::ChatTurnsLoaded(ChatTurnsLoadedAction { turns, turns_next_cursor: next });
        self.emit(&request.chat, action, None);
        self.shared.reply(conn, id, serde_json::json!({}));
    }

    /// Answers every waiter of a failed or abandoned wake with `reason`:
    /// requests get -32603, actions are rejected unapplied.
    pub(crate) fn fail_waiters(&mut self, uri: &Uri, waiters: Vec<Waiter>, reason: &str) {
        self.fail_waiters_with(uri, waiters, INTERNAL_ERROR, reason);
    }

    /// [`Host::fail_waiters`] with requests answered by error `code`.
    /// A handshake waiting among them is answered without the session.
    pub(crate) fn fail_waiters_with(&mut self, uri: &Uri, waiters: Vec<Waiter>, code: i32, reason: &str) {
        for waiter in waiters {
            match waiter {
                Waiter::Request { conn, id, .. } => self.shared.reply_error(conn, id, error(code, reason.to_owned())),
                Waiter::Handshake { conn, id } => self.handshake_settled(conn, id, uri),
                Waiter::Action(q) => {
                    let origin = self.shared.origin_of(q.conn, q.client_seq);
                    self.reject(q.conn, &q.channel, q.action, origin, reason.to_owned());
                }
            }
        }
    }
}

// ---- Session commands: scope, commands queued behind a write, chats ----
impl Host {
    /// The scope a new session is charged to (Sessions page, "Whose it
    /// is"): the `scope` config key when it names one of the person's
    /// memberships, else their primary membership. A host with no users
    /// directory records none. Errors (-32602): a `scope` that is not one of
    /// the person's, or memberships that do not resolve to one place.
    fn resolve_scope(&self, conn: ConnId, config: Option<&serde_json::Map<String, Value>>) -> Result<Option<String>, ahp_types::messages::JsonRpcError> {
        let Some(Principal::User { memberships, .. }) = self.shared.conns.get(&conn).and_then(|c| c.principal.as_ref()) else {
            return Ok(None);
        };
        if let Some(Value::String(asked)) = config.and_then(|c| c.get("scope")) {
            return match memberships.iter().find(|m| m.scope() == *asked) {
                Some(m) => Ok(Some(m.scope())),
                None => Err(error(INVALID_PARAMS, format!("scope {} is not one of your memberships", printable(asked)))),
            };
        }
        let primaries: Vec<_> = memberships.iter().filter(|m| m.primary).collect();
        match (primaries.as_slice(), memberships.as_slice()) {
            ([one], _) => Ok(Some(one.scope())),
            ([], [only]) => Ok(Some(only.scope())),
            ([], []) => Ok(None),
            _ => Err(error(INVALID_PARAMS, "your memberships do not resolve to one place to charge: name a scope")),
        }
    }

    /// Whether the session has a parked write or queued work: a new command
    /// waits behind it, in order ([`Host::queue_command`]).
    fn busy_with_writes(&self, session_uri: &Uri) -> bool {
        self.sessions.get(session_uri).is_some_and(|s| s.work().parked.is_some() || !s.work().inbox.is_empty())
    }

    /// Queues request `id` of `conn`, decoded, behind the session's parked
    /// write and the work already queued.
    fn queue_command(&mut self, session_uri: &Uri, conn: ConnId, id: u64, command: QueuedCommand) {
        if let Some(session) = self.sessions.get_mut(session_uri) {
            session.queue(Queued::Command { conn, id, command });
        }
    }

    /// Runs a command that waited behind a parked write on from its decoded
    /// form (`host/requests.rs`, `drain_inbox`).
    pub(crate) fn run_queued_command(&mut self, conn: ConnId, id: u64, command: QueuedCommand) {
        crate::mark!("queued_command_runs");
        match command {
            QueuedCommand::CreateChat(request) => self.create_chat(conn, id, *request),
            QueuedCommand::DisposeChat(request) => self.dispose_chat(conn, id, request),
            QueuedCommand::MoveChat(request) => self.move_chat(conn, id, request),
        }
    }

    /// `createChat`: checks, then writes the record with the new chat, and
    /// once that is durable adds it (`session/chatAdded` before the reply)
    /// and starts its agent. A chat made in a sleeping session wakes it.
    ///
    /// The checks run in one order, whether they read the request or the
    /// host; those that read only the request are made here once, and the
    /// decoded request ([`CreateChatReq`]) runs on in [`Host::create_chat`].
    pub(crate) fn on_create_chat(&mut self, conn: ConnId, id: u64, params: Value) {
        if let Err(e) = self.shared.authorize(conn, Operation::ChatCreate) {
            return self.shared.reply_error(conn, id, e);
        }
        let params: CreateChatParams = match parse(params) {
            Ok(p) => p,
            Err(e) => return self.shared.reply_error(conn, id, e),
        };
        if let Some(e) = self.create_chat_refusal(&params.channel) {
            return self.shared.reply_error(conn, id, e);
        }
        if let Some(e) = params.source.as_ref().and_then(|source| self.source_refusal(&params.channel, source)) {
            return self.shared.reply_error(conn, id, e);
        }
        let chat_id = match ResourceId::parse(&params.chat) {
            Ok(r) => r,
            Err(e) => return self.shared.reply_error(conn, id, error(INVALID_PARAMS, format!("invalid chat URI: {e}"))),
        };
        if let Some(e) = self.new_chat_refusal(&params.channel, &chat_id.uri(), params.working_directories.as_deref()) {
            return self.shared.reply_error(conn, id, e);
        }
        if let Some(m) = &params.initial_message {
            if m.origin.kind != ahp_types::state::MessageKind::User {
                return self.shared.reply_error(conn, id, error(INVALID_PARAMS, "a first message must be a user message"));
            }
            // Over a cap, refused before the chat is made: nothing is
            // written or announced (issue 25).
            let limits = &self.shared.config.limits;
            if let Err(reason) = crate::caps::check_message("initialMessage", m, limits.message_text_max_bytes, limits.message_attachments_max_bytes) {
                crate::mark!("message_refused_over_cap");
                return self.shared.reply_error(conn, id, error(INVALID_PARAMS, reason));
            }
        }
        let request = CreateChatReq {
            session: params.channel,
            chat: chat_id,
            working_directories: params.working_directories,
            initial_message: params.initial_message,
            source: params.source,
        };
        self.create_chat_checked(conn, id, request);
    }

    /// [`Host::on_create_chat`] run on from its decoded request, after a
    /// wake or a parked write: the checks that read the host run again, in
    /// their order, since it may have moved meanwhile.
    pub(crate) fn create_chat(&mut self, conn: ConnId, id: u64, request: CreateChatReq) {
        if let Err(e) = self.shared.authorize(conn, Operation::ChatCreate) {
            return self.shared.reply_error(conn, id, e);
        }
        if let Some(e) = self.create_chat_refusal(&request.session) {
            return self.shared.reply_error(conn, id, e);
        }
        if let Some(e) = self.new_chat_refusal(&request.session, &request.chat.uri(), request.working_directories.as_deref()) {
            return self.shared.reply_error(conn, id, e);
        }
        self.create_chat_checked(conn, id, request);
    }

    /// Why `session_uri` may not take a new chat now: it is unknown, being
    /// disposed or still being made, or its agent holds one chat only.
    fn create_chat_refusal(&self, session_uri: &Uri) -> Option<ahp_types::messages::JsonRpcError> {
        let Some(session) = self.sessions.get(session_uri) else {
            return Some(error(SESSION_NOT_FOUND, format!("no session {}", crate::ids::printable(session_uri))));
        };
        match session.phase() {
            Phase::Disposing(_) => return Some(error(SESSION_NOT_FOUND, "the session is being disposed")),
            Phase::Starting(_) => return Some(error(INVALID_PARAMS, "the session is still being created")),
            _ => {}
        }
        let multiple = self.shared.config.agents.iter().any(|a| a.provider == session.record().provider && a.multiple_chats);
        if !multiple {
            return Some(error(INVALID_PARAMS, "this session's agent holds one chat only"));
        }
        None
    }

    /// Why a `createChat` in `session_uri` may not have `source` (before
    /// its state is read): its agent makes no forks or side chats, or the
    /// source chat is another session's (`session/fork.rs`).
    fn source_refusal(&self, session_uri: &Uri, source: &ahp_types::commands::ChatSource) -> Option<ahp_types::messages::JsonRpcError> {
        let session = self.sessions.get(session_uri)?;
        if !self.shared.agent_forks(&session.record().provider) {
            crate::mark!("fork_refused_agent");
            return Some(error(INVALID_PARAMS, "forks and side chats are not offered by this agent"));
        }
        let Some(chat) = crate::session::fork::source_chat(source) else {
            return Some(error(INVALID_PARAMS, crate::session::fork::UNKNOWN_KIND));
        };
        if self.shared.chats.get(chat).map(|u| &**u) != Some(session_uri.as_str()) {
            crate::mark!("fork_refused_source_elsewhere");
            return Some(error(INVALID_PARAMS, "the source chat must be a chat of this session"));
        }
        None
    }

    /// Why chat `chat_uri` in `dirs` may not be made in `session_uri` now:
    /// the URI is taken, or a folder is not one of the session's.
    fn new_chat_refusal(&self, session_uri: &Uri, chat_uri: &Uri, dirs: Option<&[Uri]>) -> Option<ahp_types::messages::JsonRpcError> {
        if self.shared.chats.contains_key(chat_uri) || self.sessions.contains_key(chat_uri) {
            return Some(error(ALREADY_EXISTS, format!("chat {chat_uri} already exists")));
        }
        let session = self.sessions.get(session_uri)?;
        if let Some(dirs) = dirs {
            if let Some(bad) = dirs.iter().find(|d| !session.record().working_directories.contains(d)) {
                return Some(error(INVALID_PARAMS, format!("{} is not one of the session's folders", crate::ids::printable(bad))));
            }
        }
        None
    }

    /// A `createChat` that passed its checks: queued behind a parked write,
    /// held for a wake, or written.
    fn create_chat_checked(&mut self, conn: ConnId, id: u64, request: CreateChatReq) {
        let session_uri = request.session.clone();
        if self.busy_with_writes(&session_uri) {
            return self.queue_command(&session_uri, conn, id, QueuedCommand::CreateChat(Box::new(request)));
        }
        if self.sessions.get(&session_uri).is_some_and(|s| s.resident().is_none()) {
            if let Some(s) = self.sessions.get_mut(&session_uri) {
                crate::mark!("create_chat_wakes_session");
                s.wait(Waiter::Request { conn, id, request: WaitingRequest::CreateChat(Box::new(request)) });
            }
            return self.wake(&session_uri);
        }
        let chat_uri = request.chat.uri();
        let mut record = ChatRecord::new_chat(chat_uri.clone(), request.chat.store_key(), self.shared.now.wall);
        if let Some(source) = &request.source {
            // Resolved against the state as it is now (a side chat of a
            // running turn names it as it stands), and written with the
            // chat (`session/fork.rs`).
            match self.sessions.get(&session_uri).map(|s| s.resolve_source(source)) {
                Some(Ok(resolved)) => {
                    record.origin = Some(Box::new(resolved.origin));
                    record.seed = resolved.seed.into();
                }
                Some(Err(reason)) => return self.shared.reply_error(conn, id, error(INVALID_PARAMS, reason)),
                None => return,
            }
        }
        let work = ParkedWork::CreateChat { conn, id, chat: Box::new(record), initial_message: request.initial_message.map(Box::new) };
        self.in_session(&session_uri, |s, sh| s.park(sh, work, None));
    }

    pub(crate) fn finish_create_chat(
        &mut self,
        session_uri: &Uri,
        conn: ConnId,
        id: u64,
        record: ChatRecord,
        initial_message: Option<Message>,
        failure: Option<String>,
    ) {
        if let Some(message) = failure {
            return self.shared.reply_error(conn, id, error(INTERNAL_ERROR, format!("not saved: the session store failed: {message}")));
        }
        let chat_uri = record.resource.clone();
        let Some(wake) = self.in_session(session_uri, |s, sh| s.add_chat(sh, record)) else { return };
        if wake {
            self.wake(session_uri);
        }
        self.summary_changed(session_uri);
        self.shared.reply(conn, id, Value::Null);
        crate::mark!("chat_created");
        self.shared.log(LogLevel::Info, "chat.created", Some(session_uri.clone()), chat_uri.clone());
        if let Some(message) = initial_message {
            let turn_id = self.shared.rng.hex_id();
            let action = StateAction::ChatTurnStarted(ChatTurnStartedAction {
                turn_id,
                started_at: self.shared.now.wall.to_iso(),
                message,
                queued_message_id: None,
                meta: None,
            });
            self.process_action(session_uri, QueuedAction { conn, channel: chat_uri, client_seq: 0, action });
        }
    }

    /// `disposeChat`: the default chat is kept (-32602); any other chat is
    /// written out of the record, and once that is durable its agent is
    /// deleted, `session/chatRemoved` said, and the request answered.
    pub(crate) fn on_dispose_chat(&mut self, conn: ConnId, id: u64, params: Value) {
        if let Err(e) = self.shared.authorize(conn, Operation::ChatDispose) {
            return self.shared.reply_error(conn, id, e);
        }
        let params: DisposeChatParams = match parse(params) {
            Ok(p) => p,
            Err(e) => return self.shared.reply_error(conn, id, e),
        };
        self.dispose_chat_authorized(conn, id, DisposeChatReq { chat: params.channel });
    }

    /// [`Host::on_dispose_chat`] run on from its decoded request, after a
    /// parked write: the grant and the state are read anew.
    pub(crate) fn dispose_chat(&mut self, conn: ConnId, id: u64, request: DisposeChatReq) {
        if let Err(e) = self.shared.authorize(conn, Operation::ChatDispose) {
            return self.shared.reply_error(conn, id, e);
        }
        self.dispose_chat_authorized(conn, id, request);
    }

    /// A decoded `disposeChat` its connection may send: checked against the
    /// host, then queued behind a parked write or written.
    fn dispose_chat_authorized(&mut self, conn: ConnId, id: u64, request: DisposeChatReq) {
        let Some(session_uri) = self.shared.chats.get(&request.chat).map(|u| u.to_string()) else {
            return self.shared.reply_error(conn, id, error(SESSION_NOT_FOUND, format!("no chat {}", crate::ids::printable(&request.chat))));
        };
        let Some(session) = self.sessions.get(&session_uri) else { return };
        if session.record().is_default_chat(&request.chat) {
            return self.shared.reply_error(conn, id, error(INVALID_PARAMS, "the session's default chat is kept: dispose the session instead"));
        }
        if matches!(session.phase(), Phase::Disposing(_)) {
            return self.shared.reply_error(conn, id, error(SESSION_NOT_FOUND, "the session is being disposed"));
        }
        if self.busy_with_writes(&session_uri) {
            return self.queue_command(&session_uri, conn, id, QueuedCommand::DisposeChat(request));
        }
        let work = ParkedWork::DisposeChat { conn, id, chat: request.chat };
        self.in_session(&session_uri, |s, sh| s.park(sh, work, None));
    }

    pub(crate) fn finish_dispose_chat(&mut self, session_uri: &Uri, conn: ConnId, id: u64, chat: Uri, failure: Option<String>) {
        if let Some(message) = failure {
            return self.shared.reply_error(conn, id, error(INTERNAL_ERROR, format!("not saved: the session store failed: {message}")));
        }
        let Some(wake_done) = self.in_session(session_uri, |s, sh| s.remove_chat(sh, &chat)) else { return };
        let Some(wake_done) = wake_done else {
            return self.shared.reply(conn, id, Value::Null);
        };
        self.recount_active();
        self.summary_changed(session_uri);
        self.shared.reply(conn, id, Value::Null);
        crate::mark!("chat_disposed");
        self.shared.log(LogLevel::Info, "chat.disposed", Some(session_uri.clone()), chat);
        if wake_done {
            self.finish_wake(session_uri);
        }
    }
}

// ---- The config a session would get: resolveSessionConfig ----
impl Host {
    /// `resolveSessionConfig` and `sessionConfigCompletions`: the grant
    /// (`session:create`), the params, and the folder's trust (git is not
    /// asked about a folder the operator did not trust); then the trees
    /// ask for the facts of the folder's repository and answer when they
    /// come ([`super::git::Trees::resolve`]).
    pub(crate) fn on_resolve_request(&mut self, conn: ConnId, id: u64, params: Value, completions: bool) {
        if let Err(e) = self.shared.authorize(conn, Operation::SessionCreate) {
            return self.shared.reply_error(conn, id, e);
        }
        let (folder, request) = if completions {
            match parse::<SessionConfigCompletionsParams>(params) {
                Ok(p) => (p.working_directory, ResolveReq::Completions { property: p.property, query: p.query, config: p.config }),
                Err(e) => return self.shared.reply_error(conn, id, e),
            }
        } else {
            match parse::<ResolveSessionConfigParams>(params) {
                Ok(p) => (p.working_directory, ResolveReq::Resolve { provider: p.provider, config: p.config }),
                Err(e) => return self.shared.reply_error(conn, id, e),
            }
        };
        if let Some(uri) = folder.as_ref() {
            if let Err(reason) = self.trusted(std::slice::from_ref(uri)) {
                return self.shared.reply_error(conn, id, error(PERMISSION_DENIED, reason));
            }
        }
        self.trees().resolve(conn, id, folder.as_deref(), request);
    }
}

// ---- Moving a chat (moveChat) ----
//
// `moveChat` (issue 23 "Move"; ahp-types `MoveChatParams`,
// `ChatMoveToSessionDestination`, `MoveChatResult`; docs/DECISIONS.md, 17):
// the checks that read both sessions, then the writes in their order, then
// the reply. Each session's part is its own (`session/moves.rs`).
// - Within one session: the record with the new order is written ahead,
//   then `session/chatsReordered` with the complete order, then the reply.
// - To another session: the destination's record with the chat (under its
//   next move generation, `record::Moved`) is written first, the source
//   held meanwhile; then the source's record without it, the destination
//   held; once both are durable the chat leaves the source
//   (`session/chatRemoved`, its agent let go keeping the conversation) and
//   arrives in the destination (`session/chatAdded`, and
//   `session/chatsReordered` when it is not last; its agent resumed there
//   when the destination is live), both rows are told, and the request is
//   answered with the destination. A crash between the two writes leaves
//   the chat in both records: the higher generation keeps it at restore
//   (`Host::restore`).
// - To a new session: not offered (-32602).
impl Host {
    /// `moveChat`: the grants (`chat:dispose` to take the chat from where it
    /// is and `chat:create` to put it where it goes, both for a move within
    /// one session too; -32009 without either), the params, then
    /// [`Host::move_chat`]. A `newSession` destination is refused (-32602,
    /// "not offered"), as is one of a kind this host does not know.
    pub(crate) fn on_move_chat(&mut self, conn: ConnId, id: u64, params: Value) {
        if let Err(e) = self.move_grants(conn) {
            return self.shared.reply_error(conn, id, e);
        }
        let params: MoveChatParams = match parse(params) {
            Ok(p) => p,
            Err(e) => return self.shared.reply_error(conn, id, e),
        };
        let destination = match params.destination {
            ChatMoveDestination::Session(d) => d,
            ChatMoveDestination::NewSession(_) => {
                crate::mark!("move_refused_new_session");
                return self.shared.reply_error(conn, id, error(INVALID_PARAMS, "moveChat to a new session is not offered by this host: move the chat to an existing session"));
            }
            ChatMoveDestination::Unknown(_) => {
                return self.shared.reply_error(conn, id, error(INVALID_PARAMS, "unknown moveChat destination kind: this host takes kind \"session\""));
            }
        };
        self.move_chat_granted(conn, id, MoveChatReq { chat: params.channel, destination: destination.session, after: destination.after });
    }

    /// [`Host::on_move_chat`] run on from its decoded request, after a wake
    /// or behind a parked write: the grants and every check that reads the
    /// host are made again, since it may have moved meanwhile.
    pub(crate) fn move_chat(&mut self, conn: ConnId, id: u64, request: MoveChatReq) {
        if let Err(e) = self.move_grants(conn) {
            return self.shared.reply_error(conn, id, e);
        }
        self.move_chat_granted(conn, id, request);
    }

    /// Both grants a move needs (`chat:dispose`, `chat:create`).
    fn move_grants(&self, conn: ConnId) -> Result<(), ahp_types::messages::JsonRpcError> {
        self.shared.authorize(conn, Operation::ChatDispose)?;
        self.shared.authorize(conn, Operation::ChatCreate)
    }

    /// Why request `request` may not move its chat now, before any session
    /// is written: the chat, the destination or the anchor do not resolve,
    /// the chat is a default chat, a session is being made or disposed.
    /// Returns the source session's URI when it may.
    fn move_refusal(&self, request: &MoveChatReq) -> Result<Uri, ahp_types::messages::JsonRpcError> {
        let chat = &request.chat;
        let no_chat = || error(SESSION_NOT_FOUND, format!("no chat {}", printable(chat)));
        let source_uri = self.shared.chats.get(chat).map(|u| u.to_string()).ok_or_else(no_chat)?;
        let source = self.sessions.get(&source_uri).ok_or_else(no_chat)?;
        if let Some(e) = source.move_source_refusal(chat) {
            return Err(e);
        }
        let Some(destination) = self.sessions.get(&request.destination) else {
            return Err(error(SESSION_NOT_FOUND, format!("no session {}", printable(&request.destination))));
        };
        if let Some(e) = destination.move_anchor_refusal(chat, request.after.as_ref()) {
            return Err(e);
        }
        if let Some(e) = source.move_phase_refusal().or_else(|| destination.move_phase_refusal()) {
            return Err(e);
        }
        Ok(source_uri)
    }

    /// A `moveChat` its connection may send: checked, then queued behind a
    /// parked write, held for the source's wake, or written (the first
    /// write: the destination with the chat, the source held).
    fn move_chat_granted(&mut self, conn: ConnId, id: u64, request: MoveChatReq) {
        let source_uri = match self.move_refusal(&request) {
            Ok(uri) => uri,
            Err(e) => return self.shared.reply_error(conn, id, e),
        };
        if source_uri == request.destination {
            return self.reorder_chat(conn, id, request);
        }
        let (Some(source), Some(destination)) = (self.sessions.get(&source_uri), self.sessions.get(&request.destination)) else { return };
        if source.provider() != destination.provider() {
            crate::mark!("move_refused_other_agent");
            return self.shared.reply_error(conn, id, error(INVALID_PARAMS, "a chat moves only between sessions of the same agent"));
        }
        if !self.shared.agent_moves_chats(source.provider()) {
            crate::mark!("move_refused_agent");
            return self.shared.reply_error(conn, id, error(INVALID_PARAMS, "this session's agent cannot move a conversation to another session"));
        }
        if let Some(reason) = destination.move_in_refusal() {
            return self.shared.reply_error(conn, id, error(INVALID_PARAMS, reason));
        }
        let busy = [&source_uri, &request.destination].into_iter().find(|uri| self.busy_with_writes(uri)).cloned();
        if let Some(uri) = busy {
            return self.queue_command(&uri, conn, id, QueuedCommand::MoveChat(request));
        }
        if self.sessions.get(&source_uri).is_some_and(Session::move_needs_wake) {
            self.in_session(&source_uri, |s, _| s.move_waits_for_wake(conn, id, request));
            return self.wake(&source_uri);
        }
        let chat = match self.sessions.get(&source_uri).map(|s| s.chat_to_move(&request.chat)) {
            Some(Ok(Some(chat))) => chat,
            Some(Err(reason)) => return self.shared.reply_error(conn, id, error(INVALID_PARAMS, reason)),
            Some(Ok(None)) | None => return,
        };
        let work = MoveWork { conn, id, chat, after: request.after, source: source_uri.clone(), destination: request.destination.clone() };
        let Some(op) = self.in_session(&request.destination, |s, sh| s.park_move_in(sh, work)).flatten() else { return };
        self.in_session(&source_uri, |s, _| s.hold_for_move(op));
        crate::mark!("move_first_write");
    }

    /// A move within one session: the new order written ahead.
    fn reorder_chat(&mut self, conn: ConnId, id: u64, request: MoveChatReq) {
        let session_uri = request.destination.clone();
        if self.busy_with_writes(&session_uri) {
            return self.queue_command(&session_uri, conn, id, QueuedCommand::MoveChat(request));
        }
        let work = ParkedWork::Reorder { conn, id, chat: request.chat, after: request.after };
        self.in_session(&session_uri, |s, sh| s.park(sh, work, None));
    }

    /// A reorder's write finished: the order applied and said, then the
    /// answer (or the store's refusal, nothing changed).
    pub(crate) fn finish_reorder(&mut self, session_uri: &Uri, conn: ConnId, id: u64, chat: Uri, after: Option<Uri>, failure: Option<String>) {
        if let Some(message) = failure {
            return self.shared.reply_error(conn, id, error(INTERNAL_ERROR, format!("not saved: the session store failed: {message}")));
        }
        self.in_session(session_uri, |s, sh| s.apply_reorder(sh, &chat, after.as_ref()));
        self.summary_changed(session_uri);
        self.reply_moved(conn, id, session_uri);
        self.shared.log(LogLevel::Info, "chat.reordered", Some(session_uri.clone()), chat);
    }

    /// The first write of a move (the destination's record with the chat)
    /// finished: on success the source's record without it is written, the
    /// destination held meanwhile; on failure the source is let go and the
    /// request refused, nothing changed.
    pub(crate) fn move_in_written(&mut self, work: Box<MoveWork>, failure: Option<String>) {
        if let Some(message) = failure {
            crate::mark!("move_not_saved");
            self.release_move_hold(&work.source);
            return self.shared.reply_error(work.conn, work.id, error(INTERNAL_ERROR, format!("not saved: the session store failed: {message}")));
        }
        let (source, destination) = (work.source.clone(), work.destination.clone());
        if !self.sessions.contains_key(&source) {
            // Not reachable (a session a move holds is not disposed); the
            // chat is the destination's then.
            return self.finish_move(work, None);
        }
        let kept = work.clone();
        match self.in_session(&source, |s, sh| s.park_move_out(sh, work)).flatten() {
            Some(op) => {
                self.in_session(&destination, |s, _| s.hold_for_move(op));
            }
            // The store was not asked (not reachable: a session a move
            // holds is not disposed): the move ends on the first write.
            None => self.finish_move(kept, None),
        }
        crate::mark!("move_second_write");
    }

    /// The second write of a move (the source's record without the chat)
    /// finished: the chat leaves the source and arrives in the destination
    /// ([`Session::moved_out`], [`Session::put_moved_chat`]), both rows are
    /// told, and the request is answered with the destination.
    pub(crate) fn finish_move(&mut self, work: Box<MoveWork>, failure: Option<String>) {
        let MoveWork { conn, id, chat, after, source, destination } = *work;
        let chat_uri = chat.resource.clone();
        let (record, state, source_woke) = match self.sessions.get_mut(&source) {
            Some(s) => s.moved_out(&mut self.shared, chat, failure),
            None => (chat, None, false),
        };
        let held = self.in_session(&destination, |s, _| s.release_move_hold()) == Some(true);
        self.in_session(&destination, |s, sh| s.put_moved_chat(sh, record, state, after.as_ref()));
        self.summary_changed(&source);
        self.summary_changed(&destination);
        self.reply_moved(conn, id, &destination);
        crate::mark!("chat_moved");
        self.shared.log(LogLevel::Info, "chat.moved", Some(destination.clone()), format!("{} from {}", chat_uri, printable(&source)));
        if held {
            self.after_parked(&destination);
        }
        if source_woke {
            crate::mark!("move_out_ends_wake");
            self.finish_wake(&source);
        }
    }

    /// A move's hold on `session_uri` ends with nothing written for it:
    /// what waited behind it runs.
    fn release_move_hold(&mut self, session_uri: &Uri) {
        if self.in_session(session_uri, |s, _| s.release_move_hold()) == Some(true) {
            self.after_parked(session_uri);
        }
    }

    /// What follows any parked write's end on `session_uri` (as
    /// [`Host::on_parked_write`] does for the session whose write it was):
    /// a write owed meanwhile, what queued behind it, a queued message due.
    fn after_parked(&mut self, session_uri: &Uri) {
        if self.in_session(session_uri, |s, _| s.take_put_owed()) == Some(true) {
            self.store_put(session_uri);
        }
        self.drain_inbox(session_uri);
        self.start_queued_if_due(session_uri, false);
    }

    /// Answers a move with the chat's session after it (`MoveChatResult`).
    fn reply_moved(&mut self, conn: ConnId, id: u64, session_uri: &Uri) {
        let result = MoveChatResult { session: session_uri.clone() };
        self.shared.reply(conn, id, serde_json::to_value(result).unwrap_or(Value::Null));
    }

    /// Whether a move holds `session_uri` ([`Session::is_moving`]): such a
    /// session is not disposed until the move ends.
    pub(crate) fn moving(&self, session_uri: &Uri) -> bool {
        self.sessions.get(session_uri).is_some_and(Session::is_moving)
    }
}

/// How the host treats one client-dispatchable action type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Changes the host's own durable record: written before it is applied.
    Durable,
    /// Applied at once; nothing of it is stored.
    Volatile,
}

/// The client-dispatchable actions this host implements, and how. Anything
/// else a client sends is rejected unapplied.
fn kind_of(action: &StateAction) -> Option<Kind> {
    use StateAction::*;
    match action {
        SessionTitleChanged(_) | SessionIsReadChanged(_) | SessionIsArchivedChanged(_) | ChatTurnStarted(_) => {
            Some(Kind::Durable)
        }
        SessionWorkingDirectorySet(_) | SessionWorkingDirectoryRemoved(_) | SessionWorkingDirectoryReplaced(_) => Some(Kind::Durable),
        // A draft is written ahead like a title: kept across sleep,
        // eviction and restart, and taken without a wake.
        ChatDraftChanged(_) => Some(Kind::Durable),
        // A chat's own read and archived bits: written ahead, without a
        // wake, as the session's (`session/chat_flags.rs`).
        ChatIsReadChanged(_) | ChatIsArchivedChanged(_) => Some(Kind::Durable),
        // A rewind: the turns it takes away are written ahead, then the
        // backend forgets them (`session/rewind.rs`).
        ChatTruncated(_) => Some(Kind::Durable),
        // A chat's queue is the host's own, like a turn's sender
        // (`crate::session::pending`).
        ChatPendingMessageSet(_) | ChatPendingMessageRemoved(_) | ChatQueuedMessagesReordered(_) => Some(Kind::Durable),
        // A resume writes nothing the host owns: the turn is the backend's
        // (`session/resume.rs`).
        ChatTurnCancelled(_) | ChatToolCallConfirmed(_) | ChatTurnResume(_) => Some(Kind::Volatile),
        // A question lives and dies with its turn, which the record does
        // not hold while it runs (`session/questions.rs`).
        ChatInputAnswerChanged(_) | ChatInputCompleted(_) => Some(Kind::Volatile),
        _ => None,
    }
}

/// The grant a client-dispatched action needs (Sessions page, "Grants").
fn operation_of(action: &StateAction) -> Option<crate::grants::Operation> {
    use crate::grants::Operation as Op;
    use StateAction::*;
    Some(match action {
        SessionTitleChanged(_) => Op::SessionRename,
        SessionIsReadChanged(_) | SessionIsArchivedChanged(_) | ChatIsReadChanged(_) | ChatIsArchivedChanged(_) => Op::SessionMark,
        SessionConfigChanged(_) => Op::SessionConfigure,
        SessionWorkingDirectorySet(_) | SessionWorkingDirectoryRemoved(_) | SessionWorkingDirectoryReplaced(_)
        | ChatWorkingDirectorySet(_) | ChatWorkingDirectoryRemoved(_) => Op::SessionFolders,
        ChatTurnStarted(_) | ChatPendingMessageSet(_) | ChatPendingMessageRemoved(_) | ChatQueuedMessagesReordered(_)
        | ChatTurnResume(_) => Op::ChatSend,
        ChatTurnCancelled(_) => Op::ChatCancel,
        ChatToolCallConfirmed(_) | ChatToolCallResultConfirmed(_) | ChatToolCallComplete(_) | ChatToolCallContentChanged(_) => Op::ChatTool,
        ChatInputAnswerChanged(_) | ChatInputCompleted(_) => Op::ChatAnswer,
        ChatDraftChanged(_) => Op::ChatDraft,
        ChatTruncated(_) => Op::ChatTruncate,
        _ => return None,
    })
}

// ---- Client-dispatched actions (module docs) ----
impl Host {
    pub(crate) fn on_dispatch_action(&mut self, conn: ConnId, params: Value) {
        match parse(params) {
            Ok(p) => self.on_dispatch_action_params(conn, p),
            Err(e) => self.shared.log(LogLevel::Warn, "action.undecodable", None, e.message),
        }
    }

    /// [`Host::on_dispatch_action`] once its params are decoded.
    pub(crate) fn on_dispatch_action_params(&mut self, conn: ConnId, params: DispatchActionParams) {
        let channel = params.channel;
        let origin = self.shared.origin_of(conn, params.client_seq);
        if channel == ROOT_RESOURCE_URI {
            return self.on_root_action(conn, channel, params.action, origin);
        }
        if super::automations::is_channel(&channel) {
            let outs = self.automation().on_action(conn, channel, params.action, origin);
            return self.apply_automation(outs);
        }
        // The grant first, so that a caller without it is answered the
        // same whether the channel exists or not (an action no client may
        // send needs the grant to read the session, as knowing of the
        // channel does); then an action for a channel that does not exist is
        // dropped silently.
        let op = operation_of(&params.action).unwrap_or(crate::grants::Operation::SessionState);
        if let Err(e) = self.shared.authorize(conn, op) {
            return self.reject(conn, &channel, params.action, origin, e.message);
        }
        let Some(session_uri) = self.session_of(&channel) else { return };
        if let StateAction::SessionConfigChanged(change) = &params.action {
            // Every key of the table is sessionMutable: false, and so is
            // every other: no backend declares one mutable.
            let change: serde_json::Map<String, Value> = change.config.clone().into_iter().collect();
            let reason = crate::session_config::refused_change(&change)
                .unwrap_or_else(|| "this config change is not accepted".to_owned());
            return self.reject(conn, &channel, params.action, origin, reason);
        }
        let Some(kind) = kind_of(&params.action) else {
            // A known type whose fields do not read lands in the protocol's
            // catch-all variant: say that, not that the type is refused.
            let reason = match &params.action {
                StateAction::Unknown(raw) => match raw.get("type").and_then(Value::as_str) {
                    Some(t) => format!(
                        "{} is not an action this host takes from clients, or a required field of it is missing or of the wrong type",
                        crate::ids::printable(t)
                    ),
                    None => "an action needs a type".to_owned(),
                },
                _ => "this action type is not accepted from clients".to_owned(),
            };
            return self.reject(conn, &channel, params.action, origin, reason);
        };
        let _ = kind;
        let queued = QueuedAction { conn, channel, client_seq: params.client_seq, action: params.action };
        let Some(session) = self.sessions.get_mut(&session_uri) else { return };
        if session.work().parked.is_some() || !session.work().inbox.is_empty() {
            session.queue(Queued::Action(queued));
            return;
        }
        self.process_action(&session_uri, queued);
    }

    /// A client action on the root channel: only `root/configChanged` of
    /// `showExternalSessions`.
    fn on_root_action(&mut self, conn: ConnId, channel: Uri, action: StateAction, origin: Option<ActionOrigin>) {
        let StateAction::RootConfigChanged(change) = &action else {
            return self.reject(conn, &channel, action, origin, "this root action is not accepted from clients".to_owned());
        };
        if let Err(e) = self.shared.authorize(conn, crate::grants::Operation::SessionConfigure) {
            return self.reject(conn, &channel, action, origin, e.message);
        }
        if let Err(reason) = super::discovery::check_root_config(change) {
            return self.reject(conn, &channel, action, origin, reason);
        }
        let before = self.shared.external_filter();
        if self.emit(&channel, action, origin) {
            let found = self.finder().reconcile_external(before);
            self.apply_found(found);
        }
    }

    /// Validates one action against the session's current state and either
    /// rejects it, parks it behind its store write, queues it behind a wake,
    /// or applies it.
    pub(crate) fn process_action(&mut self, session_uri: &Uri, q: QueuedAction) {
        // A chat moved to another session while its action waited here
        // (`moveChat`): the action goes on in the chat's session now.
        if let Some(owner) = self.session_of(&q.channel).filter(|owner| owner != session_uri) {
            crate::mark!("action_follows_moved_chat");
            let Some(session) = self.sessions.get_mut(&owner) else { return };
            if session.work().parked.is_some() || !session.work().inbox.is_empty() {
                session.queue(Queued::Action(q));
                return;
            }
            return self.process_action(&owner, q);
        }
        let origin = self.shared.origin_of(q.conn, q.client_seq);
        let Some(session) = self.sessions.get(session_uri) else { return };
        match session.admit_action(&q.action) {
            Admission::Refused(reason) => return self.reject(q.conn, &q.channel, q.action, origin, reason.to_owned()),
            Admission::AfterWake => {
                if let Some(s) = self.sessions.get_mut(session_uri) {
                    s.wait(Waiter::Action(q));
                }
                return self.wake(session_uri);
            }
            Admission::Now => {}
        }
        let checked = {
            let trusted = |folder: &Uri| self.trusted(std::slice::from_ref(folder));
            let rules = ActionRules {
                takes_peers: self.shared.agent_takes_peers(&session.record().provider),
                stopping: self.stopping(),
                forgets: self.shared.agent_forgets(&session.record().provider),
                resumes: self.shared.agent_resumes(&session.record().provider),
                message_text_max_bytes: self.shared.config.limits.message_text_max_bytes,
                message_attachments_max_bytes: self.shared.config.limits.message_attachments_max_bytes,
                title_max_bytes: self.shared.config.limits.title_max_bytes,
                queued_messages_per_chat: self.shared.config.limits.queued_messages_per_chat,
                trusted: &trusted,
            };
            session.check_client_action(&q, &rules)
        };
        if let Err(reason) = checked {
            return self.reject(q.conn, &q.channel, q.action, origin, reason);
        }
        if matches!(q.action, StateAction::ChatDraftChanged(_)) && self.sessions.get(session_uri).is_some_and(|s| s.resident().is_none()) {
            crate::mark!("draft_kept_without_wake");
        }
        match kind_of(&q.action) {
            Some(Kind::Durable) => {
                // Write the record as it will be once the action applies;
                // apply and echo only when that write is durable.
                let sender = self.shared.sender_of(q.conn);
                self.in_session(session_uri, |s, sh| s.park(sh, ParkedWork::Action(q), sender));
            }
            _ => self.apply_client_action(session_uri, q),
        }
    }

    /// A record write finished: the turns held until it made a
    /// conversation's name durable go on (or fail,
    /// [`Session::conversation_written`]); the write a parked action or
    /// command waits for goes on to [`Host::on_parked_write`]; any other
    /// failed write is logged (the next write carries the record whole).
    pub(crate) fn on_record_written(&mut self, session_uri: &Uri, op: OpId, outcome: Outcome) {
        let failure = match outcome {
            Outcome::Failed { message } => Some(message),
            _ => None,
        };
        // A write that carried a conversation a start named settles first:
        // a turn held for it goes to its agent (or fails) before the
        // parked work, which may send the chat's next turn.
        let names = self.in_session(session_uri, |s, sh| s.conversation_written(sh, op, failure.is_some())).unwrap_or_default();
        if let Some(message) = failure.as_deref().filter(|_| !names.fail.is_empty()) {
            crate::mark!("conversation_not_saved_fails_turns");
            let reason = format!("not saved: the session store failed: {message}");
            for (chat, turn_id) in names.fail {
                self.fail_turn(session_uri, &chat, &turn_id, &reason);
            }
        }
        if names.wake {
            crate::mark!("conversation_written_wakes_session");
            self.wake(session_uri);
        }
        let parked = self.sessions.get(session_uri).and_then(|s| s.work().parked.as_ref()).is_some_and(|p| p.op == op);
        if parked {
            self.on_parked_write(session_uri, failure);
        } else if let Some(message) = failure {
            crate::mark!("store_write_failed");
            self.shared.log(LogLevel::Warn, "store.write_failed", Some(session_uri.clone()), message);
        }
    }

    /// A parked action's store write finished: apply it (or reject it when
    /// the write failed), then take the next queued action.
    pub(crate) fn on_parked_write(&mut self, session_uri: &Uri, failure: Option<String>) {
        let Some(session) = self.sessions.get_mut(session_uri) else { return };
        let Some(parked) = session.take_parked() else { return };
        let mut kept = parked.kept;
        match (parked.work, failure) {
            (ParkedWork::Action(q), None) => {
                let client_id = self.shared.sender_of(q.conn);
                if let Some(session) = self.sessions.get_mut(session_uri) {
                    session.write_ahead(&q, client_id, &mut kept);
                }
                self.apply_client_action(session_uri, q);
            }
            (ParkedWork::Action(q), Some(message)) => {
                let origin = self.shared.origin_of(q.conn, q.client_seq);
                self.reject(q.conn, &q.channel, q.action, origin, format!("not saved: the session store failed: {message}"));
            }
            (ParkedWork::CreateChat { conn, id, chat, initial_message }, failure) => {
                self.finish_create_chat(session_uri, conn, id, *chat, initial_message.map(|m| *m), failure)
            }
            (ParkedWork::DisposeChat { conn, id, chat }, failure) => self.finish_dispose_chat(session_uri, conn, id, chat, failure),
            (ParkedWork::StartQueued { chat, turn_id, queued_id }, failure) => {
                let next = self.in_session(session_uri, |s, sh| s.finish_queued_start(sh, &chat, turn_id, queued_id, failure)).flatten();
                if let Some(ActionNext::TurnStarted { turn_id, message }) = next {
                    self.turn_started(session_uri, chat, turn_id, message);
                }
            }
            (ParkedWork::Reorder { conn, id, chat, after }, failure) => self.finish_reorder(session_uri, conn, id, chat, after, failure),
            (ParkedWork::MoveIn(work), failure) => self.move_in_written(work, failure),
            (ParkedWork::MoveOut(work), failure) => self.finish_move(work, failure),
            // A hold's op is another session's write: never this one's.
            (ParkedWork::MoveHold, _) => {}
        }
        if self.sessions.get_mut(session_uri).is_some_and(|s| s.take_put_owed()) {
            self.store_put(session_uri);
        }
        self.drain_inbox(session_uri);
        self.start_queued_if_due(session_uri, false);
    }

    /// Takes queued actions in order until one parks again.
    pub(crate) fn drain_inbox(&mut self, session_uri: &Uri) {
        loop {
            let Some(next) = self.sessions.get_mut(session_uri).and_then(|s| s.next_queued()) else { return };
            match next {
                Queued::Action(q) => self.process_action(session_uri, q),
                Queued::Command { conn, id, command } => {
                    if self.may_resume(conn, id) {
                        // It is next in order: run it as though nothing
                        // waited behind it, or it would queue itself again
                        // behind the rest (out of order, and for ever when
                        // only commands remain).
                        let behind = self.sessions.get_mut(session_uri).map(|s| s.take_queue()).unwrap_or_default();
                        self.run_queued_command(conn, id, command);
                        if let Some(s) = self.sessions.get_mut(session_uri) {
                            s.requeue(behind);
                        }
                    }
                }
            }
        }
    }

    /// Applies a validated (and, if durable, saved) action: reducer,
    /// `serverSeq`, echo, then its side effect on the backend.
    fn apply_client_action(&mut self, session_uri: &Uri, q: QueuedAction) {
        let origin = self.shared.origin_of(q.conn, q.client_seq);
        match q.action {
            action if crate::folders::is_folder_action(&action) => {
                // The record already holds the new list (written ahead).
                // A new process root is the side effect, taken before the
                // broadcast: the agent is let go, so its next start (the
                // next turn wakes it) runs in the new root with the
                // conversation resumed.
                let root_now = self.sessions.get(session_uri).and_then(|s| s.record().working_directories.first().cloned());
                let root_shown = self
                    .sessions
                    .get(session_uri)
                    .and_then(|s| s.resident())
                    .and_then(|r| r.session.working_directories.as_ref())
                    .and_then(|l| l.first().cloned());
                if root_now != root_shown {
                    self.let_agents_go(session_uri);
                    crate::mark!("root_replaced_agent_restarts");
                    self.shared.log(LogLevel::Info, "session.root_replaced", Some(session_uri.clone()), format!(
                        "the agent starts again in {}", crate::ids::printable(root_now.as_deref().unwrap_or(""))
                    ));
                }
                self.emit(&q.channel, action, origin);
                self.summary_changed(session_uri);
            }
            action => {
                let next = self.in_session(session_uri, |s, sh| s.apply_client_action(sh, &q.channel, action, origin)).flatten();
                match next {
                    None => {}
                    Some(ActionNext::TurnStarted { turn_id, message }) => self.turn_started(session_uri, q.channel, turn_id, message),
                    Some(ActionNext::TurnCancelled) => self.end_turn_bookkeeping(session_uri, &q.channel, false, super::agents::TurnEnder::Host),
                    Some(ActionNext::TurnResumed) => self.recount_active(),
                    // Before the residency check: a live session archived now
                    // lets its agents go there, which takes its trees then.
                    Some(ActionNext::Archived(archived)) => self.trees().trees_follow_archive(session_uri, archived),
                    // A message queued in an idle chat starts at once, and
                    // its start wakes a sleeping session as any send does.
                    Some(ActionNext::QueueChanged(_)) => self.start_queued_if_due(session_uri, true),
                }
            }
        }
    }
}
