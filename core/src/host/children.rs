//! Child sessions (issue 24; Sessions page, "Sleep and wake": "a child
//! session's childFinished"; docs/DECISIONS.md, 24): `start_child_session`
//! makes a session as `createSession` would, owned as the calling session
//! is, its parent recorded on it; `child_status` reads one; each turn end
//! of a child is told to its parent as `childFinished`, once.
//!
//! Part of the host tools' owner (`host/tools.rs`): [`Family`] is its state
//! here (the links waiting to be looked at), and the rules below are
//! methods of [`Tools`], the owner at work. What reaches past the records
//! they change (add the child, drop it, wake a session, queue a message on
//! the parent's chat) they return as [`ToolOut`]s for the host to apply. A
//! turn's end reaches them through `Host::tell` (`Fact::TurnEnded`,
//! `Fact::TurnCut`, `Fact::TurnWritten`, `Fact::Disposed`).
//!
//! The link is kept on both records (`record::ToolsRecord`): the child's
//! `parent` ([`ChildOf`]: who, and the number of its last turn end with
//! what that turn said) and the parent's `children` ([`ChildEntry`]: who,
//! and the number of the last turn end delivered). A turn end is numbered
//! and written into the child's record in the write that records the end;
//! its `childFinished` is queued on the parent's default chat (as
//! `send_message` queues a message, `Host::deliver`, which wakes a sleeping
//! parent) in the parent's write that also moves `delivered` to that
//! number. Two records, two writes, in either order on disk; so:
//! - a child whose number is ahead of its parent's `delivered` after a
//!   restart owes its last turn end, and delivers it at the first input
//!   ([`Tools::settle_owed`]);
//! - a parent whose write landed when the child's did not has `delivered`
//!   ahead of the child: the child's next number starts above it, so no
//!   number is delivered twice.

use std::collections::BTreeSet;

use ahp_types::state::{MessageKind, ResponsePart, TurnState};
use ahp_types::Uri;
use serde_json::json;

use super::tools::{ToolOut, Tools};
use crate::effect::LogLevel;
use crate::grants::Operation;
use crate::record::{ChildEntry, ChildFinish, ChildOf, QueuedMessage, SessionRecord, ToolsRecord};
use crate::session::table::SessionTable;
use crate::session::{Asker, Phase, Session};
use crate::time::MonoTime;
use crate::tools::{ChildStart, HostCallId, HostToolError, HostToolErrorCode as Code, MAX_CHILDREN_PER_SESSION, MAX_CHILD_REPLY_BYTES};

fn refusal(code: Code, message: impl Into<String>) -> HostToolError {
    HostToolError::new(code, message)
}

/// The family's own state (part of `host/tools.rs`'s `ToolState`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Family {
    /// Children and parents read back at start, and children whose turn
    /// end is owed to their parent while the host stops: looked at at the
    /// next input ([`Tools::take_owed`], [`Tools::settle_owed`]).
    pub(crate) owed: BTreeSet<Uri>,
}

impl Family {
    /// A record read back at start that is a child or a parent: looked at
    /// at the first input.
    pub(crate) fn index(&mut self, record: &SessionRecord) {
        if record.tools.as_ref().is_some_and(|t| t.parent.is_some() || !t.children.is_empty()) {
            self.owed.insert(record.resource.clone());
        }
    }

    /// `now` (the current input's time), when something read back at start
    /// waits to be looked at; never while the host stops (`stopping`).
    pub(crate) fn owed_deadline(&self, stopping: bool, now: MonoTime) -> Option<MonoTime> {
        (!self.owed.is_empty() && !stopping).then_some(now)
    }
}

/// Whether `child` is a child of `parent` on both records: its link names
/// the parent, and the parent lists it.
pub(crate) fn is_child_of(sessions: &SessionTable, child: &str, parent: &str) -> bool {
    let names = sessions.get(child).and_then(|s| s.record().tools.as_ref()).and_then(|t| t.parent.as_ref()).is_some_and(|p| p.session == parent);
    names && sessions.get(parent).and_then(|s| s.record().tools.as_ref()).is_some_and(|t| t.children.iter().any(|c| c.session == child))
}

impl Tools<'_> {
    /// `start_child_session`: the checks that read the call, then (as
    /// `createSession` does) the facts of the folder's repository, then
    /// [`Tools::create_child`]. `Ok` means the call is answered later, once
    /// the child started or would not; it holds what the host applies now.
    pub(super) fn start_child_session(&mut self, call: HostCallId, caller: &Uri, chat: &Uri, provider: String, prompt: String, working_directory: Option<Uri>) -> Result<Vec<ToolOut>, HostToolError> {
        super::tools::check_text("prompt", &prompt)?;
        if !self.shared.config.agents.iter().any(|a| a.provider == provider) {
            return Err(refusal(Code::InvalidArgument, format!("no agent with provider {}", crate::ids::printable(&provider))));
        }
        let folders: Vec<Uri> = match working_directory {
            Some(dir) if crate::git::path_of_uri(&dir).is_some() => vec![dir],
            Some(dir) => return Err(refusal(Code::InvalidArgument, format!("working_directory is not a file:// folder: {}", crate::ids::printable(&dir)))),
            None => self.sessions.get(caller).and_then(|s| s.record().working_directories.first().cloned()).into_iter().collect(),
        };
        self.tool_grant(caller, Operation::SessionCreate)?;
        self.child_room(caller)?;
        self.child_allowed(caller, &provider, &folders)?;
        let request = ChildStart { parent: caller.clone(), chat: chat.clone(), provider, prompt, working_directories: folders };
        match request.working_directories.first().and_then(|f| crate::git::path_of_uri(f)) {
            Some(folder) => {
                let purpose = super::GitOp::Child { call, request: Box::new(request) };
                self.shared.git(super::Op::Git(purpose), crate::git::GitCmd::Inspect { folder, also: Vec::new() });
                Ok(Vec::new())
            }
            None => Ok(self.create_child(call, request, Ok(crate::git::RepoFacts::not_a_repo()))),
        }
    }

    /// Refused `limit_reached` when `parent` has as many children as it
    /// may.
    fn child_room(&self, parent: &Uri) -> Result<(), HostToolError> {
        let children = self.sessions.get(parent).and_then(|s| s.record().tools.as_ref()).map_or(0, |t| t.children.len());
        if children >= MAX_CHILDREN_PER_SESSION {
            crate::mark!("child_refused_limit");
            return Err(refusal(Code::LimitReached, format!("this session already has {MAX_CHILDREN_PER_SESSION} children; dispose one first")));
        }
        Ok(())
    }

    /// The trust and policy rules `createSession` applies, for a child of
    /// `parent` (its owner asks): refused `forbidden`.
    fn child_allowed(&self, parent: &Uri, provider: &str, folders: &[Uri]) -> Result<(), HostToolError> {
        if let Err(reason) = super::trusted_folders(&self.shared.config, self.sessions, self.detached, folders) {
            return Err(refusal(Code::Forbidden, reason));
        }
        let principal = self.owner_principal(parent);
        if let Err(reason) = self.shared.config.policy.check(principal.as_ref(), provider, folders.first().map(String::as_str)) {
            return Err(refusal(Code::Forbidden, reason));
        }
        Ok(())
    }

    /// Makes the child `request` asks for once its folder's `facts` are
    /// known: provisional, as a created session is, its first prompt queued
    /// on its default chat, its agent starting ([`ToolOut::AddChild`], then
    /// [`Tools::child_added`]). The call is answered when the agent started
    /// ([`Tools::child_started`]) or would not ([`Tools::child_refused`]),
    /// or now when the host moved since the call (the parent went, the host
    /// stops, the bound or the folder's trust changed).
    ///
    /// `facts` is `Err` when the folder could not be looked at (its
    /// `Inspect` did not run): refused `unavailable`, as `createSession`
    /// refuses it, since nothing says the folder is a directory.
    pub(crate) fn create_child(&mut self, call: HostCallId, request: ChildStart, facts: Result<crate::git::RepoFacts, String>) -> Vec<ToolOut> {
        let facts = facts.map_err(|message| refusal(Code::Unavailable, crate::folders::unread(&request.working_directories, &message)));
        let checked = if self.stopping {
            Err(refusal(Code::Unavailable, "the host is shutting down"))
        } else if self.sessions.get(&request.parent).is_none_or(|s| matches!(s.phase(), Phase::Disposing(_))) {
            Err(refusal(Code::NotFound, format!("session {} is gone", request.parent)))
        } else {
            self.child_room(&request.parent)
                .and_then(|()| self.child_allowed(&request.parent, &request.provider, &request.working_directories))
                // As `createSession` refuses a folder that is not a
                // directory (issue 25, DECISIONS 28).
                .and_then(|()| facts.as_ref().map_err(Clone::clone))
                .and_then(|facts| crate::folders::check_kinds(&request.working_directories, facts).map_err(|m| refusal(Code::InvalidArgument, m)))
        };
        if let Err(e) = checked {
            self.shared.log(LogLevel::Info, "tool.refused", Some(request.parent.clone()), format!("start_child_session from {}: {e}", request.chat));
            self.answer_tool(call, Err(e));
            return Vec::new();
        }
        let rid = self.fresh_child_id();
        let uri = rid.uri();
        let default_chat = rid.default_chat_uri();
        let Some(parent) = self.sessions.get(&request.parent) else { return Vec::new() };
        let owner = parent.record().owner.as_deref().map(str::to_owned);
        let scope = parent.record().scope.as_deref().map(str::to_owned);
        // The defaults for its folder, as a createSession naming no config
        // gets them; charged to the parent's scope.
        let Ok(facts) = facts else { return Vec::new() };
        let (config, offer) = crate::session_config::settle(&serde_json::Map::new(), &facts, None);
        let in_tree = self.detached.tree_of(request.working_directories.first());
        let folders = crate::folders::initial(&request.working_directories, self.shared.agent_takes_peers(&request.provider));
        let mut record = SessionRecord::new_session(&rid, request.provider.as_str().into(), folders, config, offer, owner.clone(), scope, in_tree, self.shared.now.wall);
        record.tools = Some(Box::new(ToolsRecord { parent: Some(ChildOf { session: request.parent.clone(), finished: 0, last: None }), ..ToolsRecord::default() }));
        let meta = json!({"parent": {"session": request.parent, "chat": request.chat}});
        let first = QueuedMessage {
            id: format!("child-{}", self.shared.rng.hex_id()),
            message: super::tools::message(request.prompt, MessageKind::Tool, meta),
            sender: owner.unwrap_or_default(),
        };
        record.chats[0].queued.push(first);
        let can_resume = self.shared.agent_can_resume(&record.provider);
        let session = Session::provisional(record, Asker::Tool(call), can_resume, self.shared);
        vec![ToolOut::AddChild { parent: request.parent, uri, chat: default_chat, session: Box::new(session) }]
    }

    /// The child `uri` of `parent` was added ([`ToolOut::AddChild`]):
    /// listed on its parent's record (written), its agent starting.
    pub(crate) fn child_added(&mut self, parent: &Uri, uri: &Uri) {
        if let Some(p) = self.sessions.get_mut(parent) {
            p.tools_or_default().children.push(ChildEntry { session: uri.clone(), delivered: 0 });
        }
        self.store_put(parent);
        self.expose_tool_meta(parent);
        if let Some(s) = self.sessions.get_mut(uri) {
            s.start_default_agent(self.shared);
        }
        crate::mark!("child_creating");
        self.shared.log(LogLevel::Info, "session.child_creating", Some(uri.clone()), format!("child of {parent}"));
    }

    /// A session URI no session, chat or tombstone holds:
    /// `ahp-session:/<32 hex>`.
    fn fresh_child_id(&mut self) -> crate::ids::ResourceId {
        loop {
            let rid = crate::ids::ResourceId { scheme: "ahp-session".to_owned(), id: self.shared.rng.hex_id() };
            let uri = rid.uri();
            let taken = self.sessions.contains_key(&uri) || self.shared.chats.contains_key(&uri) || self.shared.chats.contains_key(&rid.default_chat_uri()) || self.tombstones.contains_key(&uri);
            if !taken {
                return rid;
            }
        }
    }

    /// A child's agent started: its first prompt starts as its first turn
    /// (the write that records it is the child's first), and the call is
    /// answered `{session, chat}`. A host stopping meanwhile refuses it
    /// instead: its agents go, and nothing of the child was written.
    pub(crate) fn child_started(&mut self, uri: &Uri, call: HostCallId) -> Vec<ToolOut> {
        if self.stopping {
            let mut outs = vec![ToolOut::LetAgentsGo(uri.clone())];
            outs.extend(self.child_refused(uri, call, "the host is shutting down".to_owned()));
            return outs;
        }
        let Some(chat) = self.sessions.get(uri).map(|s| s.record().default_chat().into_owned()) else { return Vec::new() };
        crate::mark!("child_started");
        vec![ToolOut::StartQueued(uri.clone()), ToolOut::Answer { call, result: Ok(json!({"session": uri, "chat": chat})) }]
    }

    /// A child's agent would not start (`message`): it never existed
    /// ([`ToolOut::ForgetUnborn`]), then [`Tools::child_gone`].
    pub(crate) fn child_refused(&mut self, uri: &Uri, call: HostCallId, message: String) -> Vec<ToolOut> {
        let parent = self.sessions.get(uri).and_then(|s| s.record().tools.as_ref()).and_then(|t| t.parent.as_ref()).map(|p| p.session.clone());
        vec![ToolOut::ForgetUnborn(uri.clone()), ToolOut::ChildGone { parent, child: uri.clone(), call, message }]
    }

    /// A child that never existed was dropped: its `parent` forgets it, and
    /// the call is refused `unavailable`.
    pub(crate) fn child_gone(&mut self, parent: Option<&Uri>, child: &Uri, call: HostCallId, message: String) {
        if let Some(parent) = parent {
            self.forget_child(parent, child);
        }
        crate::mark!("child_refused_backend");
        self.shared.log(LogLevel::Warn, "session.create_failed", Some(child.clone()), message.clone());
        self.answer_tool(call, Err(refusal(Code::Unavailable, format!("the child's agent would not start: {message}"))));
    }

    /// Takes `child` off `parent`'s list (and writes it), if it is there.
    fn forget_child(&mut self, parent: &Uri, child: &Uri) {
        let Some(p) = self.sessions.get_mut(parent) else { return };
        let Some(tools) = p.tools_mut() else { return };
        let before = tools.children.len();
        tools.children.retain(|c| c.session != *child);
        if tools.children.len() != before {
            self.store_put(parent);
            self.expose_tool_meta(parent);
        }
    }

    /// `child_status(child)`: `{session, status, lastReply}` of a child of
    /// `caller`; `not_found` for any other session, so that nothing of it
    /// leaks.
    pub(super) fn child_status(&self, caller: &Uri, child: &str) -> Result<serde_json::Value, HostToolError> {
        let not_found = || refusal(Code::NotFound, format!("{} is not a child of this session", crate::ids::printable(child)));
        if !is_child_of(self.sessions, child, caller) {
            return Err(not_found());
        }
        let s = self.sessions.get(child).ok_or_else(not_found)?;
        let bits = s.status().0;
        let status = match &s.phase() {
            Phase::Starting(_) => "starting",
            _ if bits & ahp_types::state::SessionStatus::InProgress.0 != 0 => "running",
            Phase::Asleep => "asleep",
            Phase::Waking(_) => "waking",
            _ if bits & ahp_types::state::SessionStatus::Error.0 != 0 => "error",
            _ => "idle",
        };
        let link = s.record().tools.as_ref().and_then(|t| t.parent.as_ref());
        let last = link.and_then(|l| l.last.as_ref());
        Ok(json!({
            "session": child,
            "status": status,
            "lastReply": last.map(|l| l.reply.as_str()),
            "lastTurn": last.map(|l| json!({"chat": l.chat, "turnId": l.turn_id, "status": l.status})),
            "finished": link.map_or(0, |l| l.finished),
        }))
    }

    /// A turn of `chat` in session `uri` ended (`Fact::TurnEnded`,
    /// `Fact::TurnCut`): when `uri` is a child (and not being disposed),
    /// the end is numbered and written into its record's link, before the
    /// record is written. Returns whether it was (the caller then writes
    /// the record, and its parent is told: [`Tools::deliver_child_finish`]).
    pub(crate) fn note_child_finish(&mut self, uri: &Uri, chat: &Uri) -> bool {
        let Some(s) = self.sessions.get(uri) else { return false };
        if matches!(s.phase(), Phase::Disposing(_)) {
            return false;
        }
        let Some(link) = s.record().tools.as_ref().and_then(|t| t.parent.as_ref()) else { return false };
        let Some(turn) = s.resident().and_then(|r| r.chats.get(chat)).and_then(|c| c.turns.last()) else { return false };
        // A turn end is numbered once (a failure with no turn running
        // comes through here too, its chat's last turn an old one).
        if link.last.as_ref().is_some_and(|l| l.chat == *chat && l.turn_id == turn.id) {
            return false;
        }
        let delivered = self.sessions.get(&link.session).and_then(|p| p.record().tools.as_ref()).and_then(|t| t.children.iter().find(|c| c.session == *uri)).map_or(0, |c| c.delivered);
        let number = link.finished.max(delivered) + 1;
        let status = match turn.state {
            TurnState::Complete => "complete",
            TurnState::Cancelled => "cancelled",
            TurnState::Error => "error",
        };
        let finish = ChildFinish { chat: chat.clone(), turn_id: turn.id.clone(), status: status.to_owned(), reply: reply_of(turn) };
        let Some(link) = self.sessions.get_mut(uri).and_then(|s| s.tools_mut()).and_then(|t| t.parent.as_mut()) else { return false };
        link.finished = number;
        link.last = Some(finish);
        crate::mark!("child_turn_ended");
        true
    }

    /// Tells `child`'s parent of its last turn end when the parent has not
    /// been told of it (module docs): a `childFinished` queued on the
    /// parent's default chat ([`ToolOut::Deliver`]), waking it. While the
    /// host stops it is owed instead, and delivered after the restart.
    pub(crate) fn deliver_child_finish(&mut self, child: &Uri) -> Vec<ToolOut> {
        if self.stopping {
            crate::mark!("child_finish_owed_stopping");
            self.state.family.owed.insert(child.clone());
            return Vec::new();
        }
        let Some(link) = self.sessions.get(child).filter(|s| !matches!(s.phase(), Phase::Disposing(_))).and_then(|s| s.record().tools.as_ref()).and_then(|t| t.parent.clone()) else { return Vec::new() };
        let Some(last) = link.last else { return Vec::new() };
        let parent = link.session;
        if !is_child_of(self.sessions, child, &parent) || self.sessions.get(&parent).is_some_and(|p| matches!(p.phase(), Phase::Disposing(_))) {
            return Vec::new();
        }
        let Some(p) = self.sessions.get_mut(&parent) else { return Vec::new() };
        let Some(entry) = p.tools_mut().and_then(|t| t.children.iter_mut().find(|c| c.session == *child)) else { return Vec::new() };
        if entry.delivered >= link.finished {
            return Vec::new();
        }
        entry.delivered = link.finished;
        let default_chat = p.record().default_chat().into_owned();
        let sender = p.record().owner.as_deref().unwrap_or("").to_owned();
        // The turn named: two finishes saying the same must not read as
        // one turn (a kept turn is matched by its text, `kept_turns::merge`).
        let text = format!(
            "childFinished: child session {child} ended turn {} ({}). Its last reply:\n\n{}",
            last.turn_id,
            last.status,
            if last.reply.is_empty() { "(no text)" } else { last.reply.as_str() }
        );
        let meta = json!({"childFinished": {"session": child, "chat": last.chat, "turnId": last.turn_id, "status": last.status, "finish": link.finished}});
        let id = format!("child-finished-{}", self.shared.rng.hex_id());
        crate::mark!("child_finished_delivered");
        self.shared.log(LogLevel::Info, "child.finished", Some(parent.clone()), format!("{child} turn {} ({})", last.turn_id, last.status));
        vec![ToolOut::Deliver { session: parent, chat: default_chat, id, message: Box::new(super::tools::message(text, MessageKind::SystemNotification, meta)), sender }]
    }

    /// A dispose of `uri` the store refused (`Fact::DisposeRefused`): no
    /// turn end crosses a link while either end is being disposed, so the
    /// session and each child it lists are owed a look
    /// ([`Tools::settle_owed`]), which delivers what a child finished
    /// meanwhile.
    pub(crate) fn owe_family(&mut self, uri: &Uri) {
        let Some(tools) = self.sessions.get(uri).and_then(|s| s.record().tools.as_ref()) else { return };
        crate::mark!("child_links_owed_after_refused_dispose");
        let children: Vec<Uri> = tools.children.iter().map(|c| c.session.clone()).collect();
        self.state.family.owed.insert(uri.clone());
        self.state.family.owed.extend(children);
    }

    /// The sessions whose family links wait to be looked at (module docs),
    /// taken: each is then settled ([`Tools::settle_owed`]). None while the
    /// host stops (the set waits for the restart).
    pub(crate) fn take_owed(&mut self) -> BTreeSet<Uri> {
        if self.stopping {
            return BTreeSet::new();
        }
        std::mem::take(&mut self.state.family.owed)
    }

    /// Settles the links of `uri`, read back at start (or owed while the
    /// host stopped): a parent listing a child that does not name it drops
    /// the entry; a parent a `childFinished` queued before the restart
    /// waits on is woken ([`ToolOut::Wake`]); then its own link to its
    /// parent ([`ToolOut::OwedLink`], [`Tools::owed_link`]).
    pub(crate) fn settle_owed(&mut self, uri: &Uri) -> Vec<ToolOut> {
        let Some(tools) = self.sessions.get(uri).and_then(|s| s.record().tools.as_ref()) else { return Vec::new() };
        let children = tools.children.clone();
        for c in children {
            if !is_child_of(self.sessions, &c.session, uri) {
                crate::mark!("child_entry_dropped_at_restore");
                self.forget_child(uri, &c.session);
            }
        }
        let mut outs = Vec::new();
        // A childFinished queued before the restart, whose wake the
        // restart cut short: the parent wakes for it now.
        let owed_wake = self.sessions.get(uri).is_some_and(|s| {
            s.is_asleep() && s.record().chats.iter().flat_map(|c| c.queued.iter()).any(|m| is_child_finished(&m.message))
        });
        if owed_wake {
            crate::mark!("child_finished_wakes_at_restore");
            outs.push(ToolOut::Wake(uri.clone()));
        }
        outs.push(ToolOut::OwedLink(uri.clone()));
        outs
    }

    /// A child's link looked at after a restart ([`Tools::settle_owed`]):
    /// a child whose parent lists it delivers what it owes
    /// ([`Tools::deliver_child_finish`]); one whose parent does not list it
    /// (or is gone) drops its link.
    pub(crate) fn owed_link(&mut self, uri: &Uri) -> Vec<ToolOut> {
        let Some(link) = self.sessions.get(uri).and_then(|s| s.record().tools.as_ref()).and_then(|t| t.parent.clone()) else { return Vec::new() };
        if is_child_of(self.sessions, uri, &link.session) {
            self.deliver_child_finish(uri)
        } else {
            crate::mark!("child_link_dropped_at_restore");
            self.unlink_child(uri);
            Vec::new()
        }
    }

    /// Drops `child`'s link to its parent (and writes it, unless it is
    /// still starting: nothing of it is written before its first turn).
    fn unlink_child(&mut self, child: &Uri) {
        let Some(s) = self.sessions.get_mut(child) else { return };
        let starting = matches!(s.phase(), Phase::Starting(_));
        let Some(tools) = s.tools_mut() else { return };
        if tools.parent.take().is_some() {
            if !starting {
                self.store_put(child);
            }
            self.expose_tool_meta(child);
        }
    }

    /// A session disposed (`record`, as it was; `Fact::Disposed`): its
    /// parent forgets it, and its children are kept with their link dropped
    /// (docs/DECISIONS.md, 24).
    pub(crate) fn forget_family(&mut self, record: &SessionRecord) {
        let Some(tools) = record.tools.as_ref() else { return };
        if let Some(link) = &tools.parent {
            self.forget_child(&link.session, &record.resource);
        }
        for c in &tools.children {
            let names_it = self.sessions.get(&c.session).and_then(|s| s.record().tools.as_ref()).and_then(|t| t.parent.as_ref()).is_some_and(|p| p.session == record.resource);
            if names_it {
                crate::mark!("child_orphaned_by_dispose");
                self.unlink_child(&c.session);
            }
        }
        self.state.family.owed.remove(&record.resource);
    }
}

/// Whether `message` is a `childFinished` a parent was sent.
fn is_child_finished(message: &ahp_types::state::Message) -> bool {
    message.meta.as_ref().and_then(|m| m.get(super::TOOL_META_KEY)).is_some_and(|t| t.get("childFinished").is_some())
}

/// A turn's reply as its parent is told of it: its markdown, else its
/// error's message; cut to [`MAX_CHILD_REPLY_BYTES`] at a character
/// boundary.
fn reply_of(turn: &ahp_types::state::Turn) -> String {
    let mut text = String::new();
    for part in &turn.response_parts {
        if let ResponsePart::Markdown(m) = part {
            text.push_str(&m.content);
        }
    }
    if text.is_empty() {
        if let Some(e) = turn.response_parts.iter().find_map(|p| match p {
            ResponsePart::Error(e) => Some(&e.error.message),
            _ => None,
        }) {
            text.push_str(e);
        }
    }
    if text.len() > MAX_CHILD_REPLY_BYTES {
        let mut cut = MAX_CHILD_REPLY_BYTES - '…'.len_utf8();
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

impl crate::HostView<'_> {
    /// Whether `child` is a child of `parent` on both records (for the
    /// invariants).
    pub fn is_child_of(&self, child: &str, parent: &str) -> bool {
        is_child_of(&self.host.sessions, child, parent)
    }

    /// The sessions whose family links are looked at at the next input
    /// (read back at start, or a child's finish owed while the host stops).
    pub fn children_owed(&self) -> &std::collections::BTreeSet<Uri> {
        &self.host.tools.family.owed
    }
}
