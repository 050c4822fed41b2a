//! The host tools' rules (issue 24; `crate::tools` has the types): each
//! `Input::HostTool` is judged here and answered with exactly one
//! `Effect::HostToolAnswer`, in the same input (`start_child_session`,
//! once its child started or would not: `host/children.rs`).
//!
//! The host tools are an owner (issue 47, "the host routes, owners
//! decide"): [`ToolState`] holds their state (the wake index, the family
//! links of `host/children.rs`), one field on `Host`; [`Tools`] is that
//! state at work with what its rules may reach, made by `Host::tools`. Its
//! decisions never take the host: what reaches past a session's own record
//! (queue a message on a chat, add a child session, wake a session, start a
//! queued turn, ...) they return as [`ToolOut`]s, which `Host::apply_tools`
//! applies in order. Children and wakes share the one out type: a child is
//! started and answered through the host tools' channel, and both need the
//! same few host actions.
//!
//! A message a tool makes (a `send_message`, a wake's prompt) reaches its
//! chat as a queued message (`crate::session::pending`): written into the
//! target's record with the wake taken off in the same write, echoed as
//! `chat/pendingMessageSet` when the state is held, and started as the
//! chat's next turn as any queued message is, which wakes a sleeping
//! session (Sessions page, "Sleep and wake": "a send_message from another
//! session ... and a wake its agent asked for with schedule_wakeup").
//! Wakers that arrive together share one resume: the wake code coalesces
//! them (`Host::wake`).
//!
//! Grants (Sessions page, "Grants"; `crate::grants`): a tool acts as the
//! calling session's owner, as a client of that owner would. `send_message`
//! and `schedule_wakeup` are a `chat:send` (on the target, on the caller's
//! own chat), `list_peers` a `session:peers`. A host with no users
//! directory refuses nobody.

use std::collections::BTreeSet;

use ahp_types::state::{Message, MessageKind, MessageOrigin};
use ahp_types::Uri;
use serde_json::{json, Value};

use crate::effect::{Effect, LogLevel};
use crate::shared::TOOL_META_KEY;
use crate::grants::{Operation, Principal};
use crate::record::{ScheduledWake, SessionRecord};
use crate::session::table::SessionTable;
use crate::session::{Phase, Session};
use crate::time::WallTime;
use crate::tools::{HostCallId, HostToolError, HostToolErrorCode as Code, HostToolRequest, HostToolResult, MAX_TOOL_TEXT_BYTES, MAX_WAKES_PER_SESSION};

use super::Shared;

/// The longest a wake may be asked ahead: ten years, in ms (a longer one is
/// a mistake, and would overflow nothing but help nobody).
const MAX_WAKE_AHEAD_MS: i64 = 10 * 366 * 86_400_000;

fn refuse(code: Code, message: impl Into<String>) -> HostToolResult {
    Err(HostToolError::new(code, message))
}

/// The host tools' own state: one field on `Host` (`Host::tools`).
#[derive(Debug, Clone, Default)]
pub(crate) struct ToolState {
    /// Every wake the sessions' records hold, as (due, session, wake id),
    /// in due order: the next one is found without walking the catalogue,
    /// asleep or not (it names exactly the records' wakes:
    /// `inv_wake_index_consistent`).
    pub(crate) wakes: BTreeSet<(WallTime, Uri, String)>,
    /// Child sessions' links waiting to be looked at (`host/children.rs`).
    pub(crate) family: super::children::Family,
}

impl ToolState {
    /// The wall time the first wake is due (the timer table projects it,
    /// `host/timers.rs`); none while the host stops (`stopping`): a wake is
    /// kept in its record and fires after the restart.
    pub(crate) fn wake_due(&self, stopping: bool) -> Option<WallTime> {
        if stopping {
            return None;
        }
        self.wakes.first().map(|(at, _, _)| *at)
    }

    /// Forgets the index entries of the wakes `record` holds (a dispose):
    /// the record lists them, so only they are looked up, not every wake
    /// waiting on the host.
    pub(crate) fn forget_wakes(&mut self, record: &SessionRecord) {
        for w in record.tools.iter().flat_map(|t| t.wakes.iter()) {
            self.wakes.remove(&(w.at, record.resource.clone(), w.id.clone()));
        }
    }

    /// Indexes the wakes a restored record holds.
    pub(crate) fn index_wakes(&mut self, record: &SessionRecord) {
        for w in record.tools.iter().flat_map(|t| t.wakes.iter()) {
            self.wakes.insert((w.at, record.resource.clone(), w.id.clone()));
        }
    }
}

/// What a host tool's decision (or a child's) needs the host to do, in the
/// order `Host::apply_tools` applies them: the actions that reach past the
/// records the owner changes itself.
#[derive(Debug)]
pub(crate) enum ToolOut {
    /// Queue `message` (id `id`, sent by `sender`) on `chat` of `session`,
    /// started when due, waking the session if it sleeps (`Host::deliver`).
    Deliver {
        /// The session the chat is in.
        session: Uri,
        /// The chat the message is queued on.
        chat: Uri,
        /// The queued message's id.
        id: String,
        /// The message (boxed: the other outs are small).
        message: Box<Message>,
        /// Who sent it (the sending session's owner).
        sender: String,
    },
    /// Say what the host tools keep on `session` on its state's `_meta`
    /// (`Session::expose_tool_meta`), after the outs before it.
    ExposeMeta(Uri),
    /// The one answer to a host tool's call (`Effect::HostToolAnswer`).
    Answer {
        /// The call answered.
        call: HostCallId,
        /// Its result.
        result: HostToolResult,
    },
    /// Add the child session `session` at `uri` (`Host::add_session`) and
    /// index its default `chat`; then the owner lists it on its `parent`
    /// and starts its agent ([`Tools::child_added`]).
    AddChild {
        /// The parent session.
        parent: Uri,
        /// The child's URI.
        uri: Uri,
        /// The child's default chat.
        chat: Uri,
        /// The child, provisional.
        session: Box<Session>,
    },
    /// Start the session's next queued message if one is due
    /// (`Host::start_queued_if_due`, not for a sleeping session).
    StartQueued(Uri),
    /// Close the session's agents: it goes asleep (`Host::let_agents_go`).
    LetAgentsGo(Uri),
    /// Drop a session whose creation was refused: it never existed
    /// (`Host::forget_unborn`).
    ForgetUnborn(Uri),
    /// A child that never existed, after it was dropped: its parent forgets
    /// it and the call is refused ([`Tools::child_gone`]).
    ChildGone {
        /// Its parent, as its link named it.
        parent: Option<Uri>,
        /// The child.
        child: Uri,
        /// The `start_child_session` call to refuse.
        call: HostCallId,
        /// Why its agent would not start.
        message: String,
    },
    /// Wake the session if it sleeps (`Host::wake`).
    Wake(Uri),
    /// A family link read back at start, after the outs before it: the
    /// child's owed finish delivered, or its link dropped
    /// ([`Tools::owed_link`]).
    OwedLink(Uri),
}

/// The host tools at work for one input: their state with what their rules
/// may reach (the session table, the awareness state to answer
/// `list_peers`, the window's trees and the tombstones to place and trust a
/// child, [`Shared`]). Made by `Host::tools`.
pub(crate) struct Tools<'a> {
    /// The host tools' state.
    pub(crate) state: &'a mut ToolState,
    /// Every session.
    pub(crate) sessions: &'a mut SessionTable,
    /// What every part shares.
    pub(crate) shared: &'a mut Shared,
    /// Workspace awareness, read.
    pub(crate) awareness: &'a super::awareness::Awareness,
    /// The window's own trees, read.
    pub(crate) detached: &'a crate::detached::Registry,
    /// The tombstones, read (a child's URI is none of theirs).
    pub(crate) tombstones: &'a super::Tombstones,
    /// Whether the host is stopping (`Host::stopping`).
    pub(crate) stopping: bool,
}

impl Tools<'_> {
    /// `Input::HostTool`: one call of a host tool by the agent in `chat`,
    /// answered once (the last out, or later for a child).
    pub(crate) fn on_host_tool(&mut self, call: HostCallId, chat: &Uri, tool: HostToolRequest) -> Vec<ToolOut> {
        let name = tool.name();
        let mut outs = Vec::new();
        // `None`: answered later (a child is made first, `host/children.rs`).
        let Some(result) = self.run_tool(call, chat, tool, &mut outs) else { return outs };
        if let Err(e) = &result {
            crate::mark!("host_tool_refused");
            let session = self.session_of(chat);
            self.shared.log(LogLevel::Info, "tool.refused", session, format!("{name} from {chat}: {e}"));
        }
        outs.push(ToolOut::Answer { call, result });
        outs
    }

    fn run_tool(&mut self, call: HostCallId, chat: &Uri, tool: HostToolRequest, outs: &mut Vec<ToolOut>) -> Option<HostToolResult> {
        if let HostToolRequest::StartChildSession { provider, prompt, working_directory } = tool {
            return match self.tool_caller(chat) {
                Ok(caller) => match self.start_child_session(call, &caller, chat, provider, prompt, working_directory) {
                    Ok(more) => {
                        outs.extend(more);
                        None
                    }
                    Err(e) => Some(Err(e)),
                },
                Err(e) => Some(Err(e)),
            };
        }
        Some(self.run_answered_tool(chat, tool, outs))
    }

    /// The session URI a session or chat channel belongs to
    /// (`Host::session_of`).
    fn session_of(&self, channel: &str) -> Option<Uri> {
        super::session_of(self.sessions, &self.shared.chats, channel)
    }

    /// The session of the calling `chat`, refused when the chat is gone,
    /// its session is being disposed or the host stops.
    fn tool_caller(&self, chat: &Uri) -> Result<Uri, HostToolError> {
        let Some(caller) = self.session_of(chat).filter(|s| *s != *chat) else {
            return Err(HostToolError::new(Code::NotFound, format!("chat {chat} does not exist (any more)")));
        };
        if self.stopping {
            return Err(HostToolError::new(Code::Unavailable, "the host is shutting down"));
        }
        if self.sessions.get(&caller).is_none_or(|s| matches!(s.phase(), Phase::Disposing(_))) {
            return Err(HostToolError::new(Code::NotFound, format!("session {caller} is being disposed")));
        }
        Ok(caller)
    }

    /// A tool answered in the input that brought it.
    fn run_answered_tool(&mut self, chat: &Uri, tool: HostToolRequest, outs: &mut Vec<ToolOut>) -> HostToolResult {
        let caller = self.tool_caller(chat)?;
        match tool {
            HostToolRequest::ScheduleWakeup { after_seconds, at, prompt } => self.schedule_wakeup(&caller, chat, after_seconds, at, prompt),
            HostToolRequest::CancelWakeup { id } => self.cancel_wakeup(&caller, &id),
            HostToolRequest::SendMessage { session, text } => self.send_message(&caller, chat, &session, text, outs),
            HostToolRequest::ListPeers => {
                self.tool_grant(&caller, Operation::SessionPeers)?;
                Ok(super::awareness::answer(self.awareness, self.sessions, &self.shared.config, &caller))
            }
            HostToolRequest::ChildStatus { child } => self.child_status(&caller, &child),
            HostToolRequest::StartChildSession { .. } => refuse(Code::Unavailable, "start_child_session is answered once its child started"),
        }
    }

    /// Queues the one answer to `call` now (no out before it waits).
    pub(crate) fn answer_tool(&mut self, call: HostCallId, result: HostToolResult) {
        self.shared.effects.push(Effect::HostToolAnswer { call, result });
    }

    /// Whether session `uri`'s owner holds `op` (module docs): refused
    /// `forbidden` when it does not, or when it is nobody the users
    /// directory names any more.
    pub(crate) fn tool_grant(&self, uri: &Uri, op: Operation) -> Result<(), HostToolError> {
        if self.shared.config.users.is_none() {
            return Ok(());
        }
        match self.owner_principal(uri) {
            Some(p) if p.holds(op) => Ok(()),
            Some(p) => Err(HostToolError::new(Code::Forbidden, format!("the session's owner {} does not hold {}", p.owner(), op.name()))),
            None => Err(HostToolError::new(Code::Forbidden, format!("the session has no owner this host knows, so it may not {}", op.name()))),
        }
    }

    /// The principal session `uri`'s owner is, as the users directory
    /// names it now (`None` with no directory, or when it names them no
    /// more).
    pub(crate) fn owner_principal(&self, uri: &Uri) -> Option<Principal> {
        let users = self.shared.config.users.as_ref()?;
        let owner = self.sessions.get(uri).and_then(|s| s.record().owner.as_deref()).unwrap_or("");
        if let Some(id) = owner.strip_prefix("user:") {
            users.users.iter().find(|u| u.id == id).map(|u| Principal::User { id: u.id.clone(), role: u.role, administrator: u.administrator, memberships: Vec::new() })
        } else if let Some(name) = owner.strip_prefix("plugin:") {
            users.plugins.iter().find(|p| p.name == name).map(|p| Principal::Plugin { name: p.name.clone(), role: p.role })
        } else {
            owner.strip_prefix("root:").map(|host| Principal::Root { host: host.to_owned() })
        }
    }

    /// Writes session `uri`'s record ([`Session::store_put`]).
    pub(crate) fn store_put(&mut self, uri: &Uri) {
        if let Some(s) = self.sessions.get_mut(uri) {
            s.store_put(self.shared);
        }
    }

    /// Says what the host tools keep on session `uri` on its state's
    /// `_meta` ([`Session::expose_tool_meta`]).
    pub(crate) fn expose_tool_meta(&mut self, uri: &Uri) {
        if let Some(s) = self.sessions.get_mut(uri) {
            s.expose_tool_meta(self.shared);
        }
    }

    /// `schedule_wakeup`: a wake written into the caller's record.
    fn schedule_wakeup(&mut self, caller: &Uri, chat: &Uri, after_seconds: Option<u64>, at: Option<String>, prompt: String) -> HostToolResult {
        let now = self.shared.now.wall;
        let due = match (after_seconds, at.as_deref()) {
            (Some(secs), None) => WallTime(now.0.saturating_add(i64::try_from(secs.saturating_mul(1000)).unwrap_or(i64::MAX))),
            (None, Some(text)) => match WallTime::parse_iso(text) {
                Some(t) => t,
                None => return refuse(Code::InvalidArgument, format!("at is not an RFC 3339 time: {}", crate::ids::printable(text))),
            },
            _ => return refuse(Code::InvalidArgument, "give exactly one of after_seconds and at"),
        };
        if due.0.saturating_sub(now.0) > MAX_WAKE_AHEAD_MS {
            return refuse(Code::InvalidArgument, "a wake may be at most ten years ahead");
        }
        check_text("prompt", &prompt)?;
        self.tool_grant(caller, Operation::ChatSend)?;
        let Some(session) = self.sessions.get_mut(caller) else { return refuse(Code::NotFound, format!("no session {caller}")) };
        let tools = session.tools_or_default();
        if tools.wakes.len() >= MAX_WAKES_PER_SESSION {
            crate::mark!("wake_refused_limit");
            return refuse(Code::LimitReached, format!("this session already has {MAX_WAKES_PER_SESSION} wakes waiting; cancel one first"));
        }
        tools.next_wake += 1;
        let id = format!("wake-{}", tools.next_wake);
        tools.wakes.push(ScheduledWake { id: id.clone(), chat: chat.clone(), at: due, prompt });
        self.state.wakes.insert((due, caller.clone(), id.clone()));
        crate::mark!("wake_scheduled");
        self.store_put(caller);
        self.expose_tool_meta(caller);
        Ok(json!({"id": id, "at": due.to_iso(), "chat": chat}))
    }

    /// `cancel_wakeup`: one of the caller's wakes forgotten.
    fn cancel_wakeup(&mut self, caller: &Uri, id: &str) -> HostToolResult {
        let Some(session) = self.sessions.get_mut(caller) else { return refuse(Code::NotFound, format!("no session {caller}")) };
        let Some(wake) = session.take_wake(id) else {
            return refuse(Code::NotFound, format!("this session has no wake {}", crate::ids::printable(id)));
        };
        self.state.wakes.remove(&(wake.at, caller.clone(), wake.id));
        self.store_put(caller);
        self.expose_tool_meta(caller);
        Ok(json!({"id": id, "cancelled": true}))
    }

    /// `send_message`: `text` queued on the target's default chat as a
    /// message from the caller (docs/DECISIONS.md, 21), through
    /// [`ToolOut::Deliver`] pushed on `outs`.
    fn send_message(&mut self, caller: &Uri, chat: &Uri, target: &str, text: String, outs: &mut Vec<ToolOut>) -> HostToolResult {
        if let Err(e) = crate::ids::ResourceId::parse(target) {
            return refuse(Code::InvalidArgument, format!("session: {e}"));
        }
        check_text("text", &text)?;
        let target: Uri = target.to_owned();
        // A session still being created is not listed yet (Sessions page:
        // "nothing announces it or lists it until its first turn").
        let Some(session) = self.sessions.get(&target).filter(|s| !matches!(s.phase(), Phase::Disposing(_) | Phase::Starting(_)) && s.is_announced() && !s.record().external) else {
            return refuse(Code::NotFound, format!("no session {target} on this host"));
        };
        if target == *caller {
            return refuse(Code::Forbidden, "a session may not send a message to itself; use schedule_wakeup to prompt yourself later");
        }
        let default_chat: Uri = session.record().default_chat().into_owned();
        let full = session.record().chats.iter().find(|c| c.resource == default_chat).is_some_and(|c| c.queued.len() >= self.shared.config.limits.queued_messages_per_chat);
        self.tool_grant(caller, Operation::ChatSend)?;
        if full {
            return refuse(Code::LimitReached, format!("{target} already has {} messages queued", self.shared.config.limits.queued_messages_per_chat));
        }
        let id = format!("msg-{}", self.shared.rng.hex_id());
        let meta = json!({"from": {"session": caller, "chat": chat}});
        let sender = self.sessions.get(caller).and_then(|s| s.record().owner.as_deref()).unwrap_or("").to_owned();
        crate::mark!("tool_message_sent");
        outs.push(ToolOut::Deliver { session: target.clone(), chat: default_chat.clone(), id: id.clone(), message: Box::new(message(text, MessageKind::Agent, meta)), sender });
        Ok(json!({"session": target, "chat": default_chat, "turnId": id}))
    }

    /// Fires the first wake due at the current wall time, once: taken off
    /// its session's record in the same write that queues its prompt
    /// (docs/DECISIONS.md, 20). `None` when none is due or the host stops
    /// (a wake is kept in its record and fires after the restart); else
    /// the outs that queue its prompt, which the host applies before it
    /// asks for the next (`Host::fire_wakes`, after every input).
    pub(crate) fn fire_next_wake(&mut self) -> Option<Vec<ToolOut>> {
        if self.stopping {
            return None;
        }
        let now = self.shared.now.wall;
        let first = self.state.wakes.first().filter(|(at, _, _)| *at <= now).cloned()?;
        self.state.wakes.remove(&first);
        let (_, uri, id) = first;
        let Some(session) = self.sessions.get_mut(&uri) else { return Some(Vec::new()) };
        let disposing = matches!(session.phase(), Phase::Disposing(_));
        let Some(wake) = session.take_wake(&id) else { return Some(Vec::new()) };
        if disposing {
            // Its session is going: the wake goes with it (kept, it
            // would be due and unfired; the tombstone keeps none).
            crate::mark!("wake_dropped_disposing");
            self.shared.log(LogLevel::Info, "wake.dropped", Some(uri.clone()), format!("{}: the session is being disposed", wake.id));
            return Some(Vec::new());
        }
        // The chat may have moved to another session or gone since.
        let owner = self.session_of(&wake.chat).filter(|s| *s != wake.chat);
        if owner.as_ref() != Some(&uri) {
            crate::mark!("wake_chat_gone");
            self.shared.log(LogLevel::Info, "wake.dropped", Some(uri.clone()), format!("{}: chat {} is no longer in this session", wake.id, wake.chat));
            self.store_put(&uri);
            self.expose_tool_meta(&uri);
            return Some(Vec::new());
        }
        crate::mark!("wake_fired");
        self.shared.log(LogLevel::Info, "wake.fired", Some(uri.clone()), format!("{} on {}", wake.id, wake.chat));
        let sender = self.sessions.get(&uri).and_then(|s| s.record().owner.as_deref()).unwrap_or("").to_owned();
        let meta = json!({"wake": wake.id});
        // Its own id, not the wake's: a wake id a lost write gave out
        // may be given again after a restart.
        let id = format!("{}-{}", wake.id, self.shared.rng.hex_id());
        let deliver = ToolOut::Deliver { session: uri.clone(), chat: wake.chat, id, message: Box::new(message(wake.prompt, MessageKind::Agent, meta)), sender };
        Some(vec![deliver, ToolOut::ExposeMeta(uri)])
    }
}

impl crate::HostView<'_> {
    /// The host's index of waiting wakes: (due, session, wake id), in due
    /// order (for the invariants: it names exactly the records' wakes).
    pub fn wake_index(&self) -> &std::collections::BTreeSet<(WallTime, Uri, String)> {
        &self.host.tools.wakes
    }
}


/// Refuses `text` (the tool parameter `what`) `invalid_argument` when it is
/// blank or longer than [`MAX_TOOL_TEXT_BYTES`].
pub(super) fn check_text(what: &str, text: &str) -> Result<(), HostToolError> {
    if text.trim().is_empty() {
        return Err(HostToolError::new(Code::InvalidArgument, format!("{what} is empty")));
    }
    if text.len() > MAX_TOOL_TEXT_BYTES {
        return Err(HostToolError::new(Code::InvalidArgument, format!("{what} is longer than {MAX_TOOL_TEXT_BYTES} bytes")));
    }
    Ok(())
}

/// A message a host tool made, its `_meta` saying so.
pub(super) fn message(text: String, kind: MessageKind, tool_meta: Value) -> Message {
    let meta = [(TOOL_META_KEY.to_owned(), tool_meta)].into_iter().collect();
    Message { text, origin: MessageOrigin { kind }, attachments: None, model: None, agent: None, meta: Some(meta) }
}
