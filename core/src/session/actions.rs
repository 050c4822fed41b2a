//! A client action's rules that are the session's own (docs/DECISIONS.md,
//! 2: write-ahead): the checks it must pass against the session's state,
//! what it writes into the session's record before it is applied, and
//! applying it once durable.
//! The host decides the rest (grants, whether the session must wake first,
//! the store write, the echo): `host/requests.rs`.

use ahp_types::actions::{ActionOrigin, ChatTurnCancelledAction, SessionTitleChangedAction, StateAction};
use ahp_types::state::{Message, MessageKind, ToolCallState};
use ahp_types::Uri;

use crate::effect::BackendCmd;
use crate::shared::{Op, Shared};
use crate::record::SessionRecord;
use crate::session::{Parked, ParkedWork, Phase, QueuedAction, Session};

/// What the host does after a session applied a client action
/// ([`Session::apply_client_action`]).
#[derive(Debug, Clone, PartialEq)]
pub enum ActionNext {
    /// A turn started: recount `activeSessions`, then hand the turn on
    /// (waking the session first when its agent is not running).
    TurnStarted {
        /// The turn's id.
        turn_id: String,
        /// The person's message.
        message: std::sync::Arc<Message>,
    },
    /// The chat's running turn was cancelled: what every turn's end does.
    TurnCancelled,
    /// The chat's last turn was resumed (`session/resume.rs`) and handed
    /// to its agent: recount `activeSessions`.
    TurnResumed,
    /// The session's archived bit is now this: its trees follow.
    Archived(bool),
    /// This chat's queue changed (`crate::session::pending`): a queued
    /// message may be due now.
    QueueChanged(Uri),
}

/// Whether a session takes a client action now ([`Session::admit_action`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Refused unapplied, with this reason.
    Refused(&'static str),
    /// Its state was evicted: the session wakes, and the action waits for
    /// it.
    AfterWake,
    /// Checked against the state now ([`Session::check_client_action`]).
    Now,
}

/// The host-wide facts a client action is checked against
/// ([`Session::check_client_action`]).
pub struct ActionRules<'a> {
    /// Whether the session's agent can take peer working directories.
    pub takes_peers: bool,
    /// Whether the host is stopping (a new turn is refused then).
    pub stopping: bool,
    /// Whether the session's agent can forget turns (`chat/truncated`,
    /// `AgentSpec::forgets`).
    pub forgets: bool,
    /// Whether the session's agent can resume a turn that ended in a
    /// resumable error (`chat/turnResume`, `AgentSpec::resumes_turns`).
    pub resumes: bool,
    /// The largest message or draft text taken, in bytes
    /// (`Limits::message_text_max_bytes`).
    pub message_text_max_bytes: usize,
    /// The largest attachments of a message taken, in bytes of their JSON
    /// (`Limits::message_attachments_max_bytes`).
    pub message_attachments_max_bytes: usize,
    /// The largest session title taken, in bytes
    /// (`Limits::title_max_bytes`).
    pub title_max_bytes: usize,
    /// Most queued messages one chat holds (`Limits::queued_messages_per_chat`).
    pub queued_messages_per_chat: usize,
    /// Whether agents may run in a folder a client adds (Sessions page,
    /// "Isolation and worktrees"); `Err` is the reason a client reads.
    pub trusted: &'a dyn Fn(&Uri) -> Result<(), String>,
}

impl ActionRules<'_> {
    /// A client's message against the size caps (`caps::check_message`);
    /// `field` names it in the refusal.
    pub fn message_cap(&self, field: &str, message: &ahp_types::state::Message) -> Result<(), String> {
        crate::caps::check_message(field, message, self.message_text_max_bytes, self.message_attachments_max_bytes).inspect_err(|_| crate::mark!("message_refused_over_cap"))
    }
}

impl Session {
    /// Whether this session takes `action` now, by its phase: not while it
    /// is being made or disposed; a cancel or an approval not while it is
    /// asleep with nothing in hand ("a session sleeps with nothing
    /// running": no turn to cancel, no tool call to confirm, and a wake
    /// would not make one; issue 19's audit of the wakers,
    /// `core/tests/wakers.rs`); and one that needs the session's state
    /// only once a wake brought it back.
    pub fn admit_action(&self, action: &StateAction) -> Admission {
        match self.phase {
            Phase::Disposing(_) => return Admission::Refused("the session is being disposed"),
            Phase::Starting(_) => return Admission::Refused("the session is still being created"),
            _ => {}
        }
        let idle_asleep = self.phase == Phase::Asleep && self.work.pending_sends.is_empty() && self.work.git_begin.is_none();
        if idle_asleep
            && (matches!(action, StateAction::ChatTurnCancelled(_) | StateAction::ChatToolCallConfirmed(_))
                || crate::session::questions::is_question_action(action))
        {
            crate::mark!("turn_action_refused_asleep");
            return Admission::Refused("the session is asleep: no turn is running");
        }
        // A resume goes to the chat's running agent: an asleep (or waking)
        // session wakes first, as a turn's send does (`session/resume.rs`).
        let asleep = matches!(self.phase, Phase::Asleep | Phase::Waking(_));
        if (needs_state(action) && self.resident.is_none()) || (asleep && matches!(action, StateAction::ChatTurnResume(_))) {
            crate::mark!("action_waits_for_wake");
            return Admission::AfterWake;
        }
        Admission::Now
    }

    /// The checks a client action must pass against this session before
    /// anything is written (AHP 5, write-ahead: a failed check is echoed
    /// back unapplied with the `Err` as its `rejectionReason`). The
    /// host-wide facts it needs come in `rules`.
    pub fn check_client_action(&self, q: &QueuedAction, rules: &ActionRules<'_>) -> Result<(), String> {
        let session = self;
        let on_session = q.channel == self.record.resource;
        match &q.action {
            StateAction::SessionTitleChanged(_) | StateAction::SessionIsReadChanged(_) | StateAction::SessionIsArchivedChanged(_) => {
                if !on_session {
                    return Err("a session action must be dispatched on the session channel".into());
                }
                if let StateAction::SessionTitleChanged(a) = &q.action {
                    crate::caps::check_title(&a.title, rules.title_max_bytes).inspect_err(|_| crate::mark!("title_refused_over_cap"))?;
                }
                Ok(())
            }
            action if crate::folders::is_folder_action(action) => {
                if !on_session {
                    return Err("a session action must be dispatched on the session channel".into());
                }
                let list = &session.record.working_directories;
                crate::folders::check(list, action, rules.takes_peers)?;
                if let Some(folder) = crate::folders::added(action) {
                    (rules.trusted)(folder)?;
                }
                if crate::folders::moves_root(list, action) {
                    // The agent's process must start again in the new root:
                    // only between turns, and only on a backend that can
                    // resume the conversation there.
                    if !session.can_resume {
                        return Err("this session's agent cannot be restarted in another folder".into());
                    }
                    if session.has_work_in_hand() {
                        return Err("the process root can be replaced only while no turn is running".into());
                    }
                }
                Ok(())
            }
            action if crate::session::chat_flags::is_chat_flag_action(action) => self.check_chat_flag(&q.channel, action),
            StateAction::ChatDraftChanged(d) => {
                if on_session {
                    return Err("a chat action must be dispatched on a chat channel".into());
                }
                if !session.record.chats.iter().any(|c| c.resource == q.channel) {
                    return Err("no such chat".into());
                }
                match &d.draft {
                    Some(m) => {
                        rules.message_cap("draft", m)?;
                        if m.origin.kind != MessageKind::User {
                            return Err("a draft must be a user message".into());
                        }
                        Ok(())
                    }
                    None => Ok(()),
                }
            }
            action => {
                if on_session {
                    return Err("a chat action must be dispatched on a chat channel".into());
                }
                let resident = session.resident.as_ref().ok_or("the session's state is not loaded")?;
                let chat = resident.chats.get(&q.channel).ok_or("no such chat")?;
                if crate::session::pending::is_pending_action(action) {
                    return crate::session::pending::check(action, chat, rules);
                }
                if crate::session::questions::is_question_action(action) {
                    return crate::session::questions::check(action, chat, rules.message_text_max_bytes);
                }
                match action {
                    StateAction::ChatTurnStarted(a) => {
                        if rules.stopping {
                            return Err(crate::shared::REFUSED_WHILE_STOPPING.into());
                        }
                        rules.message_cap("message", &a.message)?;
                        if a.message.origin.kind != MessageKind::User {
                            return Err("a turn from a client must carry a user message".into());
                        }
                        if a.turn_id.is_empty() || a.turn_id.len() > 256 {
                            return Err("a turn id must be 1 to 256 bytes".into());
                        }
                        if chat.active_turn.is_some() || session.work.pending_sends.iter().any(|(c, _, _)| *c == q.channel) {
                            return Err("a turn is already running in this chat".into());
                        }
                        if session.turn_id_taken(&q.channel, chat, &a.turn_id) {
                            return Err("that turn id was already used in this chat".into());
                        }
                        if a.queued_message_id.is_some() {
                            return Err("queued messages are not supported by this host".into());
                        }
                        Ok(())
                    }
                    StateAction::ChatTruncated(a) => session.check_truncate(&q.channel, a, rules.forgets),
                    StateAction::ChatTurnResume(a) => session.check_resume(&q.channel, chat, a, rules.resumes, rules.stopping),
                    StateAction::ChatTurnCancelled(a) => match &chat.active_turn {
                        Some(t) if t.id == a.turn_id => Ok(()),
                        _ => Err("no such turn is running".into()),
                    },
                    StateAction::ChatToolCallConfirmed(a) => {
                        let Some(turn) = chat.active_turn.as_ref().filter(|t| t.id == a.turn_id) else {
                            return Err("no such turn is running".into());
                        };
                        let pending = turn.response_parts.iter().any(|p| match p {
                            ahp_types::state::ResponsePart::ToolCall(tc) => {
                                matches!(&tc.tool_call, ToolCallState::PendingConfirmation(s) if s.tool_call_id == a.tool_call_id)
                            }
                            _ => false,
                        });
                        if pending {
                            Ok(())
                        } else {
                            Err("no such tool call is waiting for confirmation".into())
                        }
                    }
                    _ => Err("this action type is not accepted from clients".into()),
                }
            }
        }
    }

    /// Applies a checked (and, if durable, saved) client action on
    /// `channel`: the reducer, `serverSeq` and the echo with `origin`, then
    /// what it does to the session (a turn's clock, the title a first
    /// message gives, an external session adopted, the chat mirrored, a
    /// cancel or an approval sent to the agent). `None` when the reducer
    /// refused it or nothing more is to do; else what the host does next.
    /// A working-directories action is the host's (its agents may go
    /// first).
    pub(crate) fn apply_client_action(&mut self, sh: &mut Shared, channel: &Uri, action: StateAction, origin: Option<ActionOrigin>) -> Option<ActionNext> {
        let session_uri = self.record.resource.clone();
        match action {
            StateAction::ChatTurnStarted(mut a) => {
                // The host stamps the start with its own clock: the server
                // wins over the client's optimistic copy.
                a.started_at = sh.now.wall.to_iso();
                let turn_id = a.turn_id.clone();
                let title = self.title_from_first_message(&a.message.text);
                // The agent gets the record's kept copy of the message,
                // shared: a copy of a 900 KB message is a millisecond of
                // page faults on the driver (issue 25).
                let kept = self.record.chats.iter().find(|c| c.resource == *channel).and_then(|c| crate::kept_turns::message_of(c, &turn_id));
                let message = kept.unwrap_or_else(|| std::sync::Arc::new(a.message.clone()));
                if !self.emit(sh, channel, StateAction::ChatTurnStarted(a), origin) {
                    return None;
                }
                if let Some(resident) = self.resident.as_mut() {
                    resident.turn_started_mono.insert(channel.clone(), sh.now.mono);
                }
                self.mark_activity(sh);
                self.touch(sh);
                if let Some(title) = title {
                    self.record.title = title.as_str().into();
                    self.emit(sh, &session_uri, StateAction::SessionTitleChanged(SessionTitleChangedAction { title }), None);
                }
                self.adopt(sh);
                self.after_chat_change(sh, channel);
                Some(ActionNext::TurnStarted { turn_id, message })
            }
            StateAction::ChatTurnCancelled(a) => self.cancel_turn(sh, channel, a, origin).then_some(ActionNext::TurnCancelled),
            StateAction::ChatTurnResume(a) => self.apply_resume(sh, channel, a, origin).then_some(ActionNext::TurnResumed),
            action if crate::session::chat_flags::is_chat_flag_action(&action) => {
                self.apply_chat_flag(sh, channel, action, origin);
                None
            }
            StateAction::ChatTruncated(a) => {
                self.apply_truncate(sh, channel, a, origin);
                None
            }
            action if crate::session::pending::is_pending_action(&action) => self.apply_pending_action(sh, channel, action, origin),
            action if crate::session::questions::is_question_action(&action) => {
                self.apply_question_action(sh, channel, action, origin);
                None
            }
            StateAction::ChatToolCallConfirmed(a) => {
                let (turn_id, tool_call_id, approved) = (a.turn_id.clone(), a.tool_call_id.clone(), a.approved);
                if !self.emit(sh, channel, StateAction::ChatToolCallConfirmed(a), origin) {
                    return None;
                }
                self.mark_activity(sh);
                self.after_chat_change(sh, channel);
                self.backend(sh, Op::Fire, channel.clone(), BackendCmd::ConfirmTool { turn_id, tool_call_id, approved });
                None
            }
            action @ (StateAction::SessionTitleChanged(_) | StateAction::SessionIsReadChanged(_) | StateAction::SessionIsArchivedChanged(_)) => {
                let archived = match &action {
                    StateAction::SessionIsArchivedChanged(a) => Some(a.is_archived),
                    _ => None,
                };
                self.emit(sh, channel, action, origin);
                self.summary_changed(sh);
                archived.map(ActionNext::Archived)
            }
            action => {
                self.emit(sh, channel, action, origin);
                None
            }
        }
    }

    /// Cancels `chat`'s turn (a client's `chat/turnCancelled` with
    /// `origin`, or the host's at the end of a graceful stop): its end with
    /// the host's duration, kept as cancelled; a send that never reached
    /// the agent is dropped, else the agent is told to cancel while it runs
    /// (live, or until a dispose deletes it: a graceful stop's cancels
    /// reach a disposing session's turn too; a client's never do, since a
    /// disposing session admits no action).
    /// False, with nothing done, when the reducer refuses it. What every
    /// turn's end does next is the caller's.
    pub(crate) fn cancel_turn(&mut self, sh: &mut Shared, chat: &Uri, mut cancel: ChatTurnCancelledAction, origin: Option<ActionOrigin>) -> bool {
        cancel.duration = self.turn_duration(chat, sh.now.mono);
        let turn_id = cancel.turn_id.clone();
        if !self.emit(sh, chat, StateAction::ChatTurnCancelled(cancel), origin) {
            return false;
        }
        self.end_kept_turn(chat, &turn_id, Some(crate::kept_turns::KeptEnd::Cancelled));
        // The turn's send, if it never reached the agent, goes before the
        // turn's end is counted: a residency check there must not see it as
        // work still in hand.
        let before = self.work.pending_sends.len();
        self.work.pending_sends.retain(|(c, t, _)| !(c == chat && *t == turn_id));
        if self.work.pending_sends.len() == before && matches!(self.phase, Phase::Live { .. } | Phase::Disposing(_)) {
            self.backend(sh, Op::Fire, chat.clone(), BackendCmd::Cancel { turn_id });
        }
        true
    }

    /// Writes the record as it will be once `work` is done and parks `work`
    /// until that write is durable (docs/DECISIONS.md, 2: the echo, or the
    /// reply, is the acknowledgment, so it waits for durability). The store
    /// gets the new record; the session keeps the old one until then.
    /// `sender` is who a started turn is recorded as sent by.
    pub(crate) fn park(&mut self, sh: &mut Shared, work: ParkedWork, sender: Option<String>) {
        let saved = self.record.clone();
        let mut kept = None;
        match &work {
            ParkedWork::Action(q) => self.write_ahead(q, sender, &mut kept),
            ParkedWork::CreateChat { chat, .. } => self.record.chats.push((**chat).clone()),
            ParkedWork::DisposeChat { chat, .. } => self.record.chats.retain(|c| c.resource != *chat),
            ParkedWork::Reorder { chat, after, .. } => crate::session::moves::reorder(&mut self.record.chats, chat, after.as_ref()),
            ParkedWork::MoveIn(w) => crate::session::moves::place(&mut self.record.chats, w.chat.clone(), w.after.as_ref()),
            ParkedWork::MoveOut(w) => self.record.chats.retain(|c| c.resource != w.chat.resource),
            // Parked by `Session::park_queued_start`, never here; a hold
            // is set by the host with the other session's write.
            ParkedWork::StartQueued { .. } | ParkedWork::MoveHold => {}
        }
        let op = self.store_put(sh);
        self.record = saved;
        if let Some(op) = op {
            self.work.parked = Some(Box::new(Parked { op, work, kept }));
        }
    }

    /// Writes the host-owned part of client action `q` into the record, as
    /// it will be once the action applies (the store gets this copy before
    /// the action is echoed). `sender` is who a started turn is recorded as
    /// sent by; `kept` is a started turn's message as the record keeps it,
    /// shared by every write of the same action (set by the first).
    pub fn write_ahead(&mut self, q: &QueuedAction, sender: Option<String>, kept: &mut Option<std::sync::Arc<Message>>) {
        let after = self.last_turn(&q.channel);
        apply_to_record(&mut self.record, q, sender, after.as_ref().map(|(id, n)| (id.as_str(), *n)), kept);
        if let StateAction::ChatTruncated(a) = &q.action {
            let dropped = self.truncated_away(&q.channel, a.turn_id.as_deref());
            crate::session::rewind::record_truncation(&mut self.record, &q.channel, &dropped);
        }
    }

    /// Whether `id` may not name a new turn of chat `channel` (held state
    /// `chat`): a turn of the chat has it, the running one included, or a
    /// rewound turn whose forget is still owed (`session/rewind.rs`: a new
    /// turn under it would be left out with it). The one rule for a
    /// client's turn and a queued message's (`crate::session::pending`).
    pub(crate) fn turn_id_taken(&self, channel: &Uri, chat: &ahp_types::state::ChatState, id: &str) -> bool {
        chat.turns.iter().any(|t| t.id == id)
            || chat.active_turn.as_ref().is_some_and(|t| t.id == id)
            || self.record.chats.iter().any(|c| c.resource == *channel && c.forgetting.iter().any(|f| f == id))
    }

    /// The id of `chat`'s last ended turn and how many it has, as the
    /// session's state holds them (a started turn's place).
    pub(crate) fn last_turn(&self, chat: &Uri) -> Option<(String, usize)> {
        let turns = &self.resident.as_ref()?.chats.get(chat)?.turns;
        turns.last().map(|t| (t.id.clone(), turns.len()))
    }
}

/// Applies the host-owned part of an action to the durable record. `after`
/// is the chat's last turn id and turn count (a started turn's place);
/// `kept`, a started turn's message as already kept (else kept now).
fn apply_to_record(record: &mut SessionRecord, q: &QueuedAction, sender: Option<String>, after: Option<(&str, usize)>, kept: &mut Option<std::sync::Arc<Message>>) {
    match &q.action {
        StateAction::SessionTitleChanged(a) => record.title = a.title.as_str().into(),
        StateAction::SessionIsReadChanged(a) => record.is_read = a.is_read,
        StateAction::SessionIsArchivedChanged(a) => record.is_archived = a.is_archived,
        action if crate::folders::is_folder_action(action) => {
            crate::folders::apply(&mut record.working_directories, action);
            root_moved(record);
        }
        action if crate::session::chat_flags::is_chat_flag_action(action) => {
            crate::session::chat_flags::record_chat_flag(record, &q.channel, action)
        }
        StateAction::ChatDraftChanged(d) => {
            if let Some(chat) = record.chats.iter_mut().find(|c| c.resource == q.channel) {
                chat.draft = d.draft.clone().map(Box::new);
            }
        }
        action if crate::session::pending::is_pending_action(action) => crate::session::pending::apply_to_record(record, q, sender),
        StateAction::ChatTurnStarted(a) => {
            if let Some(chat) = record.chats.iter_mut().find(|c| c.resource == q.channel) {
                let message = std::sync::Arc::clone(kept.get_or_insert_with(|| std::sync::Arc::new(a.message.clone())));
                record_turn_start(chat, &a.turn_id, &a.started_at, message, sender.unwrap_or_default(), after);
            }
        }
        _ => {}
    }
}

/// Writes a started turn into `chat`'s record, the one way for a client's
/// turn and a queued message's alike (`crate::session::pending`): who sent
/// it, and the turn kept from its echo on until the backend has it
/// (`crate::kept_turns`). `after` is the chat's last turn id and turn
/// count (the turn's place).
pub(crate) fn record_turn_start(chat: &mut crate::record::ChatRecord, turn_id: &str, started_at: &str, message: std::sync::Arc<Message>, sender: String, after: Option<(&str, usize)>) {
    chat.senders.insert(turn_id.to_owned(), sender);
    crate::kept_turns::hold(chat, crate::kept_turns::KeptTurn {
        id: turn_id.to_owned(),
        started_at: started_at.to_owned(),
        message,
        after: after.map(|(id, _)| id.to_owned()),
        index: after.map_or(0, |(_, n)| n),
        ended: None,
    });
}

/// A client moved the session's root to another folder (`record` already
/// holds the new list): the folder (and tree) it worked in is kept as the
/// session's, and its next send asks git about the new root. Part of the
/// same record write as the move itself: a process that stopped between
/// two writes left a session working outside the tree it still called its
/// own (issue 19, seed 42704).
fn root_moved(record: &mut crate::record::SessionRecord) {
    let root = record.working_directories.first().and_then(|u| crate::git::path_of_uri(u));
    let Some(git) = record.git.as_mut() else { return };
    if git.moved {
        return;
    }
    let own_tree = git.worktree.as_ref().map(|w| w.path.clone());
    let in_own_tree = root.as_deref().zip(own_tree.as_deref()).is_some_and(|(r, t)| crate::trust::within(r, t));
    if root.is_some() && (in_own_tree || (own_tree.is_none() && root.as_deref() == Some(git.folder.as_str()))) {
        return;
    }
    if git.repo_root.is_some() {
        let former = crate::git::FormerFolder { folder: git.folder.clone(), worktree: git.worktree.take() };
        git.former.push(former);
    }
    git.worktree = None;
    git.moved = true;
}

/// Whether the action needs the session's protocol state in memory.
fn needs_state(action: &StateAction) -> bool {
    !matches!(
        action,
        StateAction::SessionTitleChanged(_)
            | StateAction::SessionIsReadChanged(_)
            | StateAction::SessionIsArchivedChanged(_)
            // "A config change and a draft are kept without a wake."
            | StateAction::ChatDraftChanged(_)
            // A chat's own read and archived bits, as the session's.
            | StateAction::ChatIsReadChanged(_)
            | StateAction::ChatIsArchivedChanged(_)
    )
}

