//! The host's services that reach no session: replies and notifications
//! to connections, log lines, op ids and the effects they go out with,
//! and who a connection is. Used by the host and by a session's own rules
//! alike ([`Shared`] is what those rules may touch besides their session).

use ahp_types::actions::{ActionEnvelope, ActionOrigin, StateAction};
use ahp_types::Uri;
use std::sync::Arc;

use crate::external::{ExternalFilter, ExternalMode};
use crate::time::WallTime;

use super::{Op, Shared, SHOW_EXTERNAL};
use crate::effect::{Broadcast, ConnId, Effect, LogEvent, LogLevel, OpId, Outbound};
use crate::git::GitCmd;

impl Shared {
    /// Stamps `action` on `channel` with the next `serverSeq`, keeps it
    /// for replay (within `replay::Window`: the last `replay_buffer_len`,
    /// at most `replay_buffer_max_bytes`) and sends it to every
    /// subscriber of the channel. The caller applied it to the state first.
    pub(crate) fn fan_out(&mut self, channel: &Uri, action: StateAction, origin: Option<ActionOrigin>) {
        self.server_seq += 1;
        let envelope = Arc::new(Broadcast::new(ActionEnvelope { channel: channel.clone(), action, server_seq: self.server_seq, origin, rejection_reason: None }));
        let subscribers: Vec<ConnId> = self.conns.iter().filter(|(_, c)| c.subscriptions.contains(channel)).map(|(id, _)| *id).collect();
        self.replay.push(&envelope, crate::replay::Window::of(&self.config));
        for conn in subscribers {
            self.send(conn, Outbound::Action(Arc::clone(&envelope)));
        }
    }

    /// Queues `message` for `conn`, while it is connected.
    pub(crate) fn send(&mut self, conn: ConnId, message: Outbound) {
        if self.conns.contains_key(&conn) {
            self.effects.push(Effect::Send { conn, message });
        }
    }

    /// Answers request `id` of `conn` with `result`.
    pub(crate) fn reply(&mut self, conn: ConnId, id: u64, result: serde_json::Value) {
        self.send(conn, Outbound::Result { id, result: crate::effect::ResultBody::Value(result) });
    }

    /// Answers request `id` of `conn` with a JSON-RPC error.
    pub(crate) fn reply_error(&mut self, conn: ConnId, id: u64, error: ahp_types::messages::JsonRpcError) {
        self.send(conn, Outbound::Error { id: Some(id), error });
    }

    /// Queues one log line (`Effect::Log`).
    pub(crate) fn log(&mut self, level: LogLevel, event: &'static str, session: Option<Uri>, detail: String) {
        self.effects.push(Effect::Log(LogEvent { level, event, session, detail }));
    }

    /// A fresh op id, noting what its completion is for.
    pub(crate) fn new_op(&mut self, op: Op) -> OpId {
        self.next_op += 1;
        let id = OpId(self.next_op);
        self.ops.insert(id, op);
        id
    }

    /// Sends git `command` (`Effect::Git`) for `op`; returns its id.
    pub(crate) fn git(&mut self, op: Op, command: GitCmd) -> OpId {
        let id = self.new_op(op);
        self.effects.push(Effect::Git { op: id, command });
        id
    }

    /// Sends a protocol notification to every root subscriber (never
    /// replayed; clients re-list after a reconnect).
    pub(crate) fn notify_root(&mut self, method: &'static str, params: serde_json::Value) {
        let subscribers: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.subscriptions.contains(ahp_types::ROOT_RESOURCE_URI))
            .map(|(id, _)| *id)
            .collect();
        let params = Arc::new(params);
        for conn in subscribers {
            self.send(conn, Outbound::Notification { method, params: Arc::clone(&params) });
        }
    }

    /// Checks that `conn` holds the grant for `op` (always, on a host with
    /// no users directory); the error is -32009.
    pub(crate) fn authorize(&self, conn: ConnId, op: crate::grants::Operation) -> Result<(), ahp_types::messages::JsonRpcError> {
        use crate::protocol::error::{error, PERMISSION_DENIED};
        if self.config.users.is_none() {
            return Ok(());
        }
        match self.conns.get(&conn).and_then(|c| c.principal.as_ref()) {
            Some(p) if p.holds(op) => Ok(()),
            Some(_) => {
                crate::mark!("grant_refused_missing_grant");
                if op.is_read() {
                    crate::mark!("grant_refused_read_op");
                } else {
                    crate::mark!("grant_refused_write_op");
                }
                Err(error(PERMISSION_DENIED, crate::grants::refusal(op)))
            }
            // The same words whatever was asked, so that a connection not
            // signed in cannot tell which channels exist.
            None => {
                crate::mark!("grant_refused_not_signed_in");
                Err(error(PERMISSION_DENIED, "authenticate first: this host serves signed-in users only"))
            }
        }
    }

    /// The owner string of the connection's principal (`user:<id>`), if any.
    pub(crate) fn owner_of(&self, conn: ConnId) -> Option<String> {
        self.conns.get(&conn).and_then(|c| c.principal.as_ref()).map(|p| p.owner())
    }

    /// The origin an action dispatched by `conn` with `client_seq` is
    /// echoed with: its client id, once it has one.
    pub(crate) fn origin_of(&self, conn: ConnId, client_seq: i64) -> Option<ActionOrigin> {
        let client_id = self.conns.get(&conn)?.client_id.clone()?;
        Some(ActionOrigin { client_id, client_seq })
    }

    /// Who a turn is recorded as sent by: the principal (`user:<id>`), or
    /// the client id on a host with no users directory.
    pub(crate) fn sender_of(&self, conn: ConnId) -> Option<String> {
        self.owner_of(conn).or_else(|| self.conns.get(&conn).and_then(|c| c.client_id.clone()))
    }

    /// The current `showExternalSessions` mode, from the root config.
    pub(crate) fn external_mode(&self) -> ExternalMode {
        self.root
            .config
            .as_ref()
            .and_then(|c| c.values.get(SHOW_EXTERNAL))
            .and_then(|v| v.as_str())
            .and_then(ExternalMode::parse)
            .unwrap_or_default()
    }

    /// Which external sessions are shown now.
    /// Reads the catalogue's own order of external rows, so it costs
    /// O(log n) whatever the catalogue's size.
    pub(crate) fn external_filter(&self) -> ExternalFilter {
        let mode = self.external_mode();
        let cutoff = self.recent_cutoff.flatten();
        let externals: Vec<(WallTime, Uri)> = match mode {
            ExternalMode::Recent => self
                .catalogue
                .newest_externals(ExternalFilter::recent_floor(self.now.wall, cutoff).0, 2)
                .into_iter()
                .map(|(ms, uri)| (WallTime(ms), uri))
                .collect(),
            _ => Vec::new(),
        };
        ExternalFilter::new(mode, self.now.wall, &externals, cutoff)
    }

    /// Whether clients are shown a session now (its `record`, its
    /// `modified_at`): every session of this host's own, an external one
    /// as `showExternalSessions` says.
    pub(crate) fn shows(&self, record: &crate::record::SessionRecord, modified_at: WallTime) -> bool {
        !record.external || self.external_filter().shows(modified_at, &record.resource)
    }

    /// Git answered the first send of a session that is gone or going
    /// (`key`, its store key) with what it made: the refs and the tree are
    /// nobody's now and go (never with work nobody committed in them).
    pub(crate) fn clean_up_begun(&mut self, key: &str, folder: String, outcome: crate::input::Outcome) {
        if let crate::input::Outcome::Git(crate::git::GitResult::Begun { repo_root: Some(_), worktree }) = outcome {
            let refs_prefix = crate::worktree::checkpoint_prefix(key);
            let command = GitCmd::Dispose { repo: folder, refs_prefix, worktree, removal: crate::git::TREE_REMOVAL };
            self.git(Op::Git(super::GitOp::Cleanup), command);
        }
    }

    /// Whether the provider's agent makes forks and side chats
    /// (`AgentSpec::forks`).
    pub(crate) fn agent_forks(&self, provider: &str) -> bool {
        self.config.agents.iter().find(|a| a.provider == provider).is_some_and(|a| a.forks)
    }

    /// Whether the provider's agent can forget turns (a rewind,
    /// `AgentSpec::forgets`).
    pub(crate) fn agent_forgets(&self, provider: &str) -> bool {
        self.config.agents.iter().find(|a| a.provider == provider).is_some_and(|a| a.forgets)
    }

    /// Whether the provider's agent can resume a turn that ended in a
    /// resumable error (`chat/turnResume`, `AgentSpec::resumes_turns`).
    pub(crate) fn agent_resumes(&self, provider: &str) -> bool {
        self.config.agents.iter().find(|a| a.provider == provider).is_some_and(|a| a.resumes_turns)
    }

    /// Whether the provider's agent can take a chat moved from another
    /// session (`moveChat`, `AgentSpec::moves_chats`).
    pub(crate) fn agent_moves_chats(&self, provider: &str) -> bool {
        self.config.agents.iter().find(|a| a.provider == provider).is_some_and(|a| a.moves_chats)
    }

    /// Whether the provider's agent takes a steering message into its
    /// running turn (`AgentSpec::steers`).
    pub(crate) fn agent_steers(&self, provider: &str) -> bool {
        self.config.agents.iter().find(|a| a.provider == provider).is_some_and(|a| a.steers)
    }

    /// Whether `provider`'s agent can take peer working directories.
    pub(crate) fn agent_takes_peers(&self, provider: &str) -> bool {
        self.config.agents.iter().find(|a| a.provider == provider).is_some_and(|a| a.peer_directories)
    }

    /// The peers a chat's agent is told at its start: none when the
    /// backend cannot take them.
    pub(crate) fn peers_for(&self, record: &crate::record::SessionRecord) -> Vec<Uri> {
        if self.agent_takes_peers(&record.provider) {
            crate::folders::peers(&record.working_directories)
        } else {
            Vec::new()
        }
    }

    /// Whether the provider's backend can resume a conversation (else its
    /// sessions never sleep).
    pub(crate) fn agent_can_resume(&self, provider: &str) -> bool {
        self.config.agents.iter().find(|a| a.provider == provider).is_some_and(|a| a.can_resume)
    }

    /// Whether `op` is a start of `chat`'s agent (one of a session's
    /// phase's awaited ops, which also hold deletes and git work).
    pub(crate) fn starts_chat(&self, op: &OpId, chat: &Uri) -> bool {
        matches!(self.ops.get(op), Some(Op::Start { chat: c, .. }) if c == chat)
    }
}
